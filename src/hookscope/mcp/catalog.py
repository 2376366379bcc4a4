"""The registry itself: every tool an assistant can call, served alike to Python, the CLI and MCP.

``TOOLS`` maps a name to its ``Tool``; ``answer(name, arguments)`` runs one (arguments checked,
answer fitted to ``max_tokens``). ``hookscope tool NAME key=value ...`` and ``python -m
hookscope.mcp`` both read this registry, so the three faces cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base.words import closest
from ..errors import OptionError
from .api_map import api
from .budget import Answer
from .evidence_reading import bundle
from .overview import explain
from .registry import Param, Tool
from .stores import alerts, info, sites, statistics
from .two_stores import compare

PATH = Param("path", "string", "A hookscope store's folder (extract, save or watch wrote it).", required=True)
SITE = "A glob over site names, e.g. 'layer4.*'; leave out for every site."

TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool("info", "What a store is: status, damage, provenance, how it was made, and what it holds (an evidence "
             "bundle: as the bundle tool reads it).",
             (PATH,), info),
        Tool("sites", "The sites (modules) a store holds, with kinds, keys, shapes, dtypes and counts.",
             (PATH, Param("select", "string", SITE)), sites),
        Tool("statistics", "Each site's values (count, mean, std, min, max, NaN, Inf, zeros); a watch store's "
             "histories.", (PATH, Param("site", "string", SITE)), statistics),
        Tool("alerts", "A watch run's alerts (module, kind, step, value, bound, advice) and thresholds.",
             (PATH,), alerts),
        Tool("explain", "A store read for you: its status, what stands out, what to ask next, then the tables.",
             (PATH,), explain),
        Tool("compare", "Two stores side by side: what they were made from, sites only one holds, how each shared "
             "site's statistics moved, and each shared site's CKA.",
             (Param("path_a", "string", "The first store's folder (A).", required=True),
              Param("path_b", "string", "The second store's folder (B).", required=True),
              Param("similarity", "boolean", "Compute the CKA of each shared site (tensor stores).", default=True)),
             compare),
        Tool("bundle", "Validate an evidence bundle against its shipped schema and read it: a wrong prediction's "
             "maps, faithfulness, ablation and layers, or a training alert's finding, ranges and reproducer.",
             (Param("path", "string", "An evidence bundle's folder (explain_prediction, watch or nan_guard "
                    "evidence=).", required=True),), bundle),
        Tool("api", "hookscope's public API: every public name with its module and first line, or one name's "
             "signature and docstring.",
             (Param("name", "string", "A public name (e.g. 'capture'); leave out for the whole map."),), api),
    )
}  # fmt: skip


def answer(name: str, arguments: Mapping[str, Any] | None = None) -> Answer:
    """Run the tool ``name`` on ``arguments`` (``max_tokens`` among them) and fit its answer to the budget.

    Args:
        name: a tool's name (``TOOLS``).
        arguments: keyword -> value, as JSON gives them.

    Returns:
        The fitted ``Answer``.

    Raises:
        OptionError: an unknown tool, or arguments its params refuse.
    """
    tool = TOOLS.get(name)
    if tool is None:
        raise OptionError(f"no tool {name!r}{closest(name, TOOLS)}; the tools are {', '.join(TOOLS)}")
    return tool.run(arguments)
