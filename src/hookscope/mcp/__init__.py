"""Tools for an AI assistant: read-only answers over stores, watch runs and the API, within a token budget.

``catalog.TOOLS`` is the one registry (``info``, ``sites``, ``statistics``, ``alerts``, ``explain``,
``compare``, ``bundle``, ``api``); each tool is a plain function returning ``budget.Section``s, fitted to
``max_tokens`` by ``budget.fit`` (whole sections dropped lowest value first and listed; what could
not be captured never dropped). ``hookscope tool NAME ...`` runs them on the command line and
``python -m hookscope.mcp`` (``server``) serves them over the Model Context Protocol. Nothing here
imports ``mcp`` except ``server``; no tool runs user code.
"""
