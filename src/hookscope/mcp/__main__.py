"""``python -m hookscope.mcp``: serve hookscope's read-only tools to an assistant over MCP (stdio)."""

from __future__ import annotations

from .server import serve

if __name__ == "__main__":
    serve()
