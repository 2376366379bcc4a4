"""``export(source, out, format="model-explorer")``: Model Explorer node data for any overlay.

::

    graph = hookscope.module_graph(model, x, exported=True)       # torch.export's node names per module
    hookscope.export(graph.colored(values), "grads.json", format="model-explorer")
    hookscope.export(w.alerts, "alerts.json", format="model-explorer", graph=graph)
    hookscope.export(run.histories(), "steps", format="model-explorer", graph=graph, column="grad_norm")

Google's Model Explorer draws a ``torch.export`` program (its PyTorch adapter: ``.pt2`` files)
and colours its nodes by *node data*: JSON ``{graph id: {"results": {node id: {"value": v}},
"name", "gradient"}}`` (``model_explorer.node_data_builder``). Its node ids are the FX node names,
which ``hookscope.graph.exported`` ties to modules through ``nn_module_stack``: a module's value
goes to every op that ran directly inside it (a convolution's one op, a block's residual add), in
each of its calls; a value keyed by one call of a module that ran more than once (``layer1.0.relu#1``,
``hookscope.graph.nodes``) goes to that call's ops only.

``source``: a ``Graph`` with an overlay, or anything ``hookscope.graph.overlay.overlay_of`` reads
(then ``graph=``, a graph built with ``exported=True``, or ``model=`` and ``x=`` to build one).
Histories of a watch run (``w.histories()``, ``run.histories()`` or the ``Watch`` itself) write a
folder, ``out/step-<n>.json`` per logged step, of the column ``column`` (default ``grad_norm``;
``measure=`` is its old name).
Modules with no node, and non-finite values (JSON has none), are left out with a warning.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..base.deprecation import renamed
from ..base.files import mark, new_output, staged_folder, write_atomically
from ..errors import CaptureWarning, OptionError, StoreError
from ..graph.nodes import Graph
from ..graph.overlay import VIRIDIS, overlay_of
from ..graph.trace import module_graph
from ..store.history import History

GRAPH_ID = "graph"  # the id Model Explorer's PyTorch adapter gives the exported program's graph


@renamed(measure="column")  # measure= is compare.cka's CKA or RSA
def write(source: Any, out: str | os.PathLike[str], *, force: bool = False, graph: Graph | None = None,
          model: Any = None, x: Any = None, column: str | None = None) -> Path:  # fmt: skip
    """Write node data of ``source`` to ``out`` (a file; a folder for a watch run's histories); see the module.

    ``graph``: a ``Graph`` built with ``exported=True`` (else ``model`` and ``x`` build one; a ``Graph``
    source is its own); ``column``: the number drawn (a Summary field, a History column: ``grad_norm``).
    """
    options = {"graph": graph, "model": model, "x": x, "column": column}
    histories = _histories(source)  # a watch run's: a folder of steps; anything else: one file
    path = new_output(out, force=force, kind="export", file=histories is None)
    found = _graph(source, options)
    if histories is not None:
        return _write_steps(histories, found, path, column or "grad_norm")
    values, what = (
        (dict(source.overlay), source.column) if isinstance(source, Graph) else overlay_of(source, column=column)
    )
    data = node_data(values, found, name=what)
    write_atomically(path, lambda tmp: tmp.write_text(json.dumps(data, indent=1), encoding="utf-8"))
    return path


def node_data(values: Mapping[str, float], graph: Graph, *, name: str) -> dict[str, Any]:
    """``{GRAPH_ID: {"results": {node id: {"value": v}}, "name": name, "gradient": [...]}}`` (ModelNodeData)."""
    results: dict[str, dict[str, float]] = {}
    unplaced, bad = [], []
    for module, value in values.items():
        if not math.isfinite(value):
            bad.append(module)
            continue
        ids = graph.export_ids.get(module, ())
        if not ids:
            unplaced.append(module)
        results.update({node: {"value": float(value)} for node in ids})
    _warn(unplaced, "ran no torch.export op of its own (a container, or not in the program)")
    _warn(bad, "has a non-finite value (JSON has none)")
    stops = [{"stop": i / (len(VIRIDIS) - 1), "bgColor": colour} for i, colour in enumerate(VIRIDIS)]
    return {GRAPH_ID: {"results": results, "name": name, "gradient": stops}}


def _warn(modules: list[str], why: str) -> None:
    if modules:
        named = ", ".join(repr(m) for m in modules[:5]) + (", ..." if len(modules) > 5 else "")
        warnings.warn(
            f"hookscope.exports.model_explorer: {len(modules)} module(s) left out of the node data, each {why}: "
            f"{named}",
            CaptureWarning,
            stacklevel=4,
        )


def _graph(source: Any, options: Mapping[str, Any]) -> Graph:
    """The graph whose ``export_ids`` key the node data: ``source``, ``graph=``, or built from ``model=``, ``x=``."""
    for graph in (options.get("graph"), source):
        if isinstance(graph, Graph) and graph.export_ids:
            return graph
    if options.get("model") is not None and options.get("x") is not None:
        graph = module_graph(options["model"], options["x"], exported=True)
        if graph.export_ids:
            return graph
        raise OptionError(f"torch.export failed on the model, so Model Explorer has no node ids for it ({graph.note})")
    raise OptionError(
        "Model Explorer node data is keyed by torch.export's node names; pass a graph built with "
        "hookscope.module_graph(model, x, exported=True) as source or graph=, or pass model= and x="
    )


def _histories(source: Any) -> Mapping[str, History] | None:
    if callable(getattr(source, "histories", None)):  # a Watch, a watch store
        source = source.histories()
    if isinstance(source, Mapping) and source and all(isinstance(h, History) for h in source.values()):
        return source
    return None


def _write_steps(histories: Mapping[str, History], graph: Graph, path: Path, column: str) -> Path:
    """One node-data file per logged step, ``step-<n>.json``, in the folder ``path``."""
    steps = sorted({step for history in histories.values() for step in history.steps})
    with staged_folder(
        path, lambda err, where: StoreError(f"cannot write {path}: {err.strerror or err} ({where})"), parents=True
    ) as staging:
        for step in steps:
            values = {name: h.row(step)[column] for name, h in histories.items() if step in h.steps}
            data = node_data(values, graph, name=f"{column}, step {step}")
            (staging / f"step-{step}.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
        mark(staging, "export")
    return path
