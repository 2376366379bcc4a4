"""The graph's data flow from ``torch.export``, where it works, and the names of its nodes per module.

::

    graph = module_graph(model, x, exported=True)   # hookscope.graph.trace: hooks, then this
    graph.built                                     # "torch.export", or "hooks ..." where export failed
    graph.export_ids["layer1.0.conv1"]              # ("conv2d_1",): Model Explorer's node ids

``torch.export`` traces the model to an FX graph of aten ops. Each op's ``nn_module_stack`` names
the modules it ran inside, innermost last: an op whose innermost module is a leaf of the hooks'
graph belongs to that leaf, any other op (an add inside a block, a flatten) is functional code
that passes on where its inputs came from. An edge goes from a leaf to the next leaf that consumes
what it (or functional code after it) produced: the same edges the hooks find, read from the
program instead of the run. Model Explorer's PyTorch adapter names its nodes by the FX node names,
so ``export_ids`` keys overlays for it (``hookscope.exports.model_explorer``). A module that ran more
than once has a node per call (``relu#1``): torch.export marks its later calls in the key of
``nn_module_stack`` (``L__self___relu@1``), which picks the call's node; ``export_ids`` holds the
module's names (every call's ops) and each call's (``export_ids["relu#1"]``).

``torch.export`` fails on dynamic control flow and on many Hugging Face models (caches, data-
dependent shapes); then the hooks' graph stays and a ``CaptureWarning`` names the error.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..errors import CaptureWarning
from .nodes import INPUT, OUTPUT, Edge, Graph, call_name


def with_export(graph: Graph, model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Graph:
    """``graph`` with ``torch.export``'s edges and node names, or as it was (with a warning) where export fails."""
    try:
        program = torch.export.export(model, args, dict(kwargs))
    except Exception as err:  # torch.export raises many types (Unsupported, UserError, RuntimeError...)
        reason = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        warnings.warn(
            f"hookscope.graph.exported: torch.export failed on {type(model).__name__} ({reason[:200]}); "
            "the graph keeps the edges the hooks found",
            CaptureWarning,
            stacklevel=3,
        )
        return dataclasses.replace(graph, note=f"{graph.note}; torch.export failed: {reason[:200]}")
    leaves = {node.name for node in graph.leaves()}
    edges, ids = _flow(program, leaves)
    note = "edges from torch.export's data flow, ops assigned to modules by nn_module_stack"
    return dataclasses.replace(graph, edges=tuple(edges), built="torch.export", note=note, export_ids=ids)


def _site(node: Any) -> tuple[str, str] | None:
    """``(module, its call's node name)`` of the innermost module an FX node ran inside, or None: torch.export
    keys a module's call ``i > 0`` with ``@i`` (``nn_module_stack``)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    key, (path, _) = list(stack.items())[-1]
    mark, call = key.rpartition("@")[1:]
    return path, call_name(path, int(call) if mark and call.isdigit() else 0)


def _owner(site: tuple[str, str] | None, leaves: set[str]) -> str | None:
    """The leaf node of ``site``: the module's own (it ran once) or its call's, or None (not a leaf)."""
    if site is None:
        return None
    module, call = site
    return module if module in leaves else call if call in leaves else None


def _flow(program: Any, leaves: set[str]) -> tuple[list[Edge], dict[str, tuple[str, ...]]]:
    """Edges between leaves (and ``input``, ``output``), and each module's FX node names."""
    user_inputs = set(program.graph_signature.user_inputs)
    made: dict[str, set[str]] = {}  # FX node -> the leaves (or input) its value came from
    edges: dict[tuple[str, str], None] = {}
    ids: dict[str, list[str]] = {}
    for node in program.graph.nodes:
        sources = set().union(*(made.get(arg.name, set()) for arg in node.all_input_nodes))
        if node.op == "placeholder":
            made[node.name] = {INPUT} if node.name in user_inputs else set()
        elif node.op == "output":
            edges.update(((s, OUTPUT), None) for s in sorted(sources))
        else:
            site = _site(node)
            owner = _owner(site, leaves)
            if site is not None:
                ids.setdefault(site[0], []).append(node.name)
                if site[0] not in leaves and owner == site[1]:  # a module that ran more than once: its call too
                    ids.setdefault(site[1], []).append(node.name)
            if owner is None:
                made[node.name] = sources
            else:
                edges.update(((s, owner), None) for s in sorted(sources) if s != owner)
                made[node.name] = {owner}
    return [Edge(s, t, "export") for s, t in edges], {k: tuple(v) for k, v in ids.items()}
