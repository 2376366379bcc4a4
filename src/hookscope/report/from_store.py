"""A report of a store, built from disk without the model: ``build_report_from_store(run) -> Report``.

::

    report = build_report_from_store(hookscope.load("acts.hookscope"))
    write_report(report, "report")       # hookscope.report.html: the same page as build_report's

Its neighbours: ``views`` (the page's data, and how a layer is drawn: the same as for
``build``'s report of a model), ``build`` (``build_report``: a model and an input) and ``html``
(the page). What it shows, and what it cannot:

- A statistics-only store: every layer's numbers over the whole data set (``RunningStats``:
  count, mean, std, min, max, mean |x|, L2, zeros, NaN/Inf, and the histogram redrawn on equal
  bins from the fixed grid, so approximate). No pictures and no percentiles: the store has no
  tensor to draw and percentiles cannot be read exactly from the grid.
- A store of tensors: one batch (``batch=``, the first by default), as ``build_report`` shows
  one input: ``summarize`` of each layer's first call, feature maps of image 0, the gradient
  and the gradient-flow chart when the store holds ``grad_output``.
- A store extracted with ``reduce=top_examples(k)``: a section per site, per unit the k inputs
  it fires on most (where they are) and the histogram of its peak per input (``report.top``);
  no patches or tokens, which need the inputs (``top_examples_section(top, inputs=...)``).
- Never predictions or CAMs: they need the model and its input, which a store does not hold.
- The module graph when the store keeps one (``save(cap, out, graph=)``, ``extract(..., graph=)``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from ..core.kinds import Kind, is_gradient
from ..core.records import Record
from ..graph.nodes import Graph
from ..stats.streaming import RunningStats
from ..store.reader import Run
from .cards import layer_views
from .content import LayerView, Report, Section, TensorView, coloured, human_time
from .flow import flow_chart

STATS_KIND: Kind = "output"  # the kind a statistics-only store is drawn by


def build_report_from_store(
    run: Run,
    *,
    batch: int | None = None,
    title: str | None = None,
    notes: Sequence[str] = (),
    max_layers: int = 64,
    sections: Sequence[Section] = (),
) -> Report:
    """What the page shows of ``run`` (see the module docstring); ``sections``: the page of a store whose
    reduction has its own view (``hookscope.probes.views.top_sections`` of a top_examples store), drawn
    in place of the layer cards."""
    prov = run.provenance
    table = run.statistics()
    kinds: tuple[Kind, ...]
    tops = list(sections)
    if tops:
        layers, left_out, kinds, flow, selected = [], [], ("output",), None, len(run)
        remark = f"the inputs each unit fires on most, over {_batches(run)}; {run.config.get('reduce')}"
    elif table:
        every = _stats_layers(run, table)
        layers, left_out = every[:max_layers], [layer.name for layer in every[max_layers:]]
        kinds, flow, remark, selected = (STATS_KIND,), None, _stats_remark(run), len(run)
    else:
        chosen = run.batches[0] if batch is None and run.batches else batch
        records = run.batch(chosen) if chosen is not None else {}
        kinds = _stored_kinds(records)
        layers, left_out = layer_views(records, kinds, max_layers=max_layers, absent=_not_stored)
        flow = flow_chart(records) if "grad_output" in kinds else None
        remark, selected = f"numbers and pictures of batch {chosen} ({_batches(run)} in the store)", len(records)
    remarks = [remark, *_incomplete(run)] + (
        [f"{len(left_out)} more layers left out (raise max_layers=, --max-layers)"] if left_out else []
    )
    return Report(
        title=title or f"{prov.get('model', 'model')} from {run.path.name}",
        model=str(prov.get("model", "unknown model")),
        parameters=int(prov.get("parameters", 0)),
        input=_batches(run),
        created=_created(prov),
        version=str(prov.get("hookscope", "")),
        notes=(*notes, _provenance_note(prov)),
        remarks=tuple(remarks),
        pictures=(), predictions=(), cam_layer="", cams=(),
        flow=flow,
        kinds=kinds,
        layers=tuple(layers),
        selected=selected,
        sections=tuple(tops),
        graph=coloured(Graph.from_dict(run.manifest["graph"]) if "graph" in run.manifest else None, flow),
    )  # fmt: skip


def _stored_kinds(records: Mapping[str, Record]) -> tuple[Kind, ...]:
    """What a batch's cards draw: output, and grad_output when the store holds it."""
    grads = any("grad_output" in r.kinds for r in records.values())
    return ("output", "grad_output") if grads else ("output",)


def _not_stored(kind: str) -> str:
    return f"no {'gradient' if is_gradient(kind) else kind} in the store"


def _stats_layers(run: Run, table: Mapping[tuple[str, str, str], RunningStats]) -> list[LayerView]:
    """One layer per site with statistics of ``STATS_KIND``, in the order the run first saw them."""
    firsts: dict[str, tuple[str, RunningStats, int]] = {}
    for (site, kind, key), stats in table.items():
        if kind == STATS_KIND:
            count = sum(1 for s, k, _ in table if (s, k) == (site, kind))
            firsts.setdefault(site, (key, stats, count - 1))
    views = []
    for i, (site, (key, stats, others)) in enumerate(firsts.items()):
        counted = f"statistics over {stats.count:,} values from {stats.updates:,} calls"
        view = TensorView(
            kind=STATS_KIND,
            key=key,
            others=others,
            shape=stats.shape or (),
            dtype=stats.dtype or "?",
            stats=stats.as_dict(),
            grid=None,
            values=(),
            note=f"{counted}; no pictures in a statistics store",
        )
        views.append(LayerView(i, site, run[site].type, 1, (view,), {}))  # one card covers every call
    return views


def _batches(run: Run) -> str:
    rows = f", {run.rows:,} rows" if run.rows is not None else ""
    return f"{len(run.batches)} batch{'es' if len(run.batches) != 1 else ''}{rows} from {run.path.name}"


def _stats_remark(run: Run) -> str:
    return (
        f"statistics over the whole run ({_batches(run)}), every call of each layer together; the histograms "
        "are redrawn from a fixed grid (8 bins an octave), so they are approximate; no percentiles"
    )


def _incomplete(run: Run) -> list[str]:
    if run.complete:
        return []
    return ["the run that wrote this store did not finish: it shows the batches completed before it stopped"]


def _created(prov: Mapping[str, object]) -> str:
    """When the store was written, as ``build_report`` dates a report; as stored when it is not ISO 8601."""
    stored = str(prov.get("created", ""))
    try:
        return human_time(datetime.datetime.fromisoformat(stored))
    except ValueError:
        return stored


def _provenance_note(prov: Mapping[str, object]) -> str:
    weights = str(prov.get("weights_sha256", ""))[:12] or "?"
    return (
        f"stored by hookscope {prov.get('hookscope', '?')} with torch {prov.get('torch', '?')} and "
        f"Python {prov.get('python', '?')} on {_created(prov) or '?'}; weights sha256 {weights}…"
    )
