"""The report of a store, built from disk without the model: ``build_report_from_store(run) -> Report``.

::

    report = build_report_from_store(hookscope.load("acts.hookscope"))
    write_report(report, "report")       # the same page as build_report's (hookscope.page)

What it shows, and what it cannot:

- A statistics-only store: every layer's numbers over the whole data set (``RunningStats``:
  count, mean, std, min, max, mean |x|, L2, zeros, NaN/Inf, and the histogram redrawn on equal
  bins from the fixed grid, so approximate). No pictures and no percentiles: the store has no
  tensor to draw and percentiles cannot be read exactly from the grid.
- A store of tensors: one batch (``batch=``, the first by default), as ``build_report`` shows
  one input: ``summarize`` of each layer's first call, feature maps of image 0, the gradient
  and the gradient-flow chart when the store holds ``grad_output``.
- Never predictions or CAMs: they need the model and its input, which a store does not hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..core.records import Record
from ..stats.streaming import RunningStats
from ..stats.summary import forward_order, gradient_flow
from ..store.reader import Run
from ..viz.charts import gradient_flow_plot
from .build import LayerView, Report, TensorView, _png, _tensor_view


def build_report_from_store(
    run: Run, *, batch: int | None = None, title: str | None = None, notes: Sequence[str] = (), max_layers: int = 64
) -> Report:
    """What the page shows of ``run`` (see the module docstring)."""
    prov = run.provenance
    table = run.statistics()
    if table:
        layers, remark = _stats_layers(run, table), _stats_remark(run)
        flow, grads, selected = None, False, len(run)
    else:
        chosen = run.batches[0] if batch is None and run.batches else batch
        records = run.batch(chosen) if chosen is not None else {}
        grads = any("grad_output" in r.kinds for r in records.values())
        layers, flow = _tensor_layers(records, grads), _flow(records) if grads else None
        remark, selected = f"numbers and pictures of batch {chosen} ({_batches(run)} in the store)", len(records)
    shown = layers[:max_layers]
    left_out = [layer.name for layer in layers[max_layers:]]
    remarks = [remark, *_incomplete(run)] + ([f"{len(left_out)} more layers left out (max_layers)"] if left_out else [])
    return Report(
        title=title or f"{prov.get('model', 'model')} from {run.path.name}",
        model=str(prov.get("model", "unknown model")),
        parameters=int(prov.get("parameters", 0)),
        input=_batches(run),
        created=str(prov.get("created", "")),
        version=str(prov.get("hookscope", "")),
        notes=(*notes, _provenance_note(prov)),
        remarks=tuple(remarks),
        pictures=(), predictions=(), cam_layer="", cams=(),
        flow=flow,
        layers=tuple(shown),
        selected=selected,
        grads=grads,
    )  # fmt: skip


def _stats_layers(run: Run, table: Mapping[tuple[str, str, str], RunningStats]) -> list[LayerView]:
    """One layer per site with output statistics, in the order the run first saw them."""
    firsts: dict[str, tuple[str, RunningStats, int]] = {}
    for (site, kind, key), stats in table.items():
        if kind == "output":
            count = sum(1 for s, k, _ in table if (s, k) == (site, kind))
            firsts.setdefault(site, (key, stats, count - 1))
    views = []
    for i, (site, (key, stats, others)) in enumerate(firsts.items()):
        note = f"statistics over {stats.count:,} values from {stats.updates:,} calls; no pictures in a statistics store"
        view = TensorView(key, others, stats.shape or (), stats.dtype or "?", stats.as_dict(), None, (), note)
        views.append(LayerView(i, site, run[site].type, 1, view, None, ""))  # one card covers every call
    return views


def _tensor_layers(records: Mapping[str, Record], grads: bool) -> list[LayerView]:
    views = []
    for i, record in enumerate(r for r in forward_order(records) if r.calls):
        call = record.calls[0]
        output = _tensor_view(call.tensors.get("output", {}), call.keys("output"), diverging=False)
        grad = _tensor_view(call.tensors.get("grad_output", {}), call.keys("grad_output"), diverging=True)
        missing = "no output in the store" if output is None else ""
        if grads and grad is None:
            missing = call.missing.get("grad_output", "no gradient in the store")
        views.append(LayerView(i, record.name, record.type, len(record.calls), output, grad, missing))
    return views


def _flow(records: Mapping[str, Record]) -> bytes | None:
    rows = gradient_flow(records)
    return _png(gradient_flow_plot(rows)) if rows else None


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


def _provenance_note(prov: Mapping[str, object]) -> str:
    weights = str(prov.get("weights_sha256", ""))[:12] or "?"
    return (
        f"stored by hookscope {prov.get('hookscope', '?')} with torch {prov.get('torch', '?')} and "
        f"Python {prov.get('python', '?')} on {prov.get('created', '?')}; weights sha256 {weights}…"
    )
