"""The training report of a store written by ``hookscope.watch``: ``build_training_report(run) -> TrainingReport``.

::

    page = hookscope.build_training_report(hookscope.load("runs/exp1.hookscope"))
    hookscope.write_report(page, "runs/exp1-report")   # runs/exp1-report/index.html
    page                                               # in a notebook: the alerts and the charts
    print(page.table())                                # a row per layer: its last logged row

``hookscope report --from runs/exp1.hookscope`` writes it for a watch store. The page, from the
top: the first non-finite value (the ``NonFiniteError`` of ``nan_guard`` that ended the run, with its step,
phase, module, call, key and rank; else the watch's first ``non_finite`` alert), the alerts; the
scalars the run logged with ``w.log`` (name, values, first and last step, last value); the
loss curve (the scalar ``loss`` of ``w.log``, when the run logged it); per-layer curves over the
logged steps of the parameter-gradient norm (log), the update ratio |Δw| / |w|
(log, the healthy band of the thresholds shaded) and the dead-unit fraction; a heatmap of layers x
steps of the gradient norm (log10) with the first non-finite cell boxed; and a table of every layer's
last row with a sparkline. One self-contained HTML file (template ``templates/training.html.j2``):
pictures are inline PNGs, CSS inline, no script, nothing fetched, every name escaped.
"""

from __future__ import annotations

import datetime
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..base.deprecation import warn_renamed
from ..base.display import Shows, shows_as, table_of
from ..base.optional import require
from ..base.words import columns
from ..errors import NonFiniteError, NotCapturedError
from ..graph.nodes import Graph
from ..graph.overlay import overlay_of
from ..graph.svg import graph_html
from ..report.content import human_time
from ..report.html import draws_page, format_number, write_page
from ..store.history import Alert, History
from ..store.reader import Run
from ..viz.curves import curves_png, heatmap_png, sparkline_png
from ..viz.fragments import data_uri, figure, more, note, view
from .sites import shown

TEMPLATE = "report/templates/training.html.j2"


@dataclass(frozen=True)
class Chart:
    title: str
    png: bytes
    caption: str


@dataclass(frozen=True)
class LayerRow:
    name: str
    type: str
    last: dict[str, float]
    sparkline: bytes | None  # the gradient norm (or the output-gradient norm) over the steps
    marks: Mapping[str, str] = field(default_factory=dict)  # column -> "undefined" (History.undefined) or "frozen"


@dataclass(frozen=True)
class ScalarRow:
    name: str
    values: int
    first: int  # the first and last step it was logged at
    last: int
    last_value: float  # the value logged last


@dataclass(frozen=True)
class TrainingReport(Shows):
    """What the training page shows (see the module docstring); ``render_html`` draws it."""

    title: str
    model: str
    parameters: int
    created: str
    version: str
    steps: int
    every: int
    logged: int
    ended: str
    alerts: tuple[Alert, ...]
    first_non_finite: Alert | None
    charts: tuple[Chart, ...]
    layers: tuple[LayerRow, ...]
    left_out: int  # layers beyond max_layers, not drawn in the curves
    ranks: int = 1  # a watch under torchrun: the ranks its rows are merged over
    graph: Graph | None = None  # the module graph, coloured by the alerts (or the last gradient norms)
    ended_on: NonFiniteError | None = None  # the error (nan_guard) that ended the run, if one did (run.non_finite)
    scalars: tuple[ScalarRow, ...] = ()  # what w.log logged (loss, lr...), by name

    def __repr__(self) -> str:
        return (
            f"<TrainingReport {self.title!r}: {self.steps} steps, {len(self.layers)} layers, {len(self.alerts)} alerts>"
        )

    def table(self) -> str:
        """A row per layer: its type and its last logged row (text)."""
        return table_of(self)


def build_training_report(
    run: Run, *, title: str | None = None, max_layers: int = 64, graph: Graph | None = None
) -> TrainingReport:
    """The training report of the watch store ``run`` (``hookscope.load``; see the module docstring).

    ``graph``: the model's ``hookscope.module_graph`` (default: the one the store keeps, if any), drawn
    coloured by the number of alerts per module (by the last logged gradient norm when none fired).

    Args:
        run: a store written by ``hookscope.watch``, opened with ``hookscope.load``.
        title: the page's title; None names the model and the store.
        max_layers: the most modules drawn, in model order.
        graph: the model's ``module_graph``; None uses the one the store keeps, if any.

    Returns:
        The training page's content; ``render_html`` or ``write_report`` draws it.

    Raises:
        NotCapturedError: the store holds no time series (not written by ``watch``).
    """
    histories = run.histories()
    if not histories:
        raise NotCapturedError(
            f"{run.path} holds no time series; a training report needs a store written by hookscope.watch"
        )
    prov, config = run.provenance, run.config
    drawn = {shown(n): h for n, h in list(histories.items())[:max_layers]}
    first = next((a for a in run.alerts if a.kind == "non_finite"), None)
    band = tuple(config.get("thresholds", {}).get("update_ratio", (3e-5, 1e-1)))
    steps = sorted({s for h in histories.values() for s in h.steps})
    scalars = run.scalars()
    return TrainingReport(
        title=title or f"{prov.get('model', 'model')}: training from {run.path.name}",
        model=str(prov.get("model", "?")),
        parameters=int(prov.get("parameters", 0)),
        created=_created(str(prov.get("created", ""))),
        version=str(prov.get("hookscope", "")),
        steps=int(config.get("steps", 0)),
        every=int(config.get("every", 0)),
        logged=len(steps),
        ended=str(config.get("ended", "")) or "while running",
        alerts=tuple(run.alerts),
        first_non_finite=first,
        charts=_loss_chart(scalars) + _charts(drawn, (band[0], band[1]), first),
        layers=tuple(_row(h, h.name in config.get("frozen", ())) for h in histories.values()),
        left_out=len(histories) - len(drawn),
        ranks=int(config.get("world_size", 1)),
        graph=_alert_graph(graph or _kept_graph(run), run.alerts, histories),
        ended_on=run.non_finite,
        scalars=tuple(_scalar_row(name, pairs) for name, pairs in scalars.items() if pairs),
    )


def _scalar_row(name: str, pairs: Sequence[tuple[int, float]]) -> ScalarRow:
    steps = [step for step, _ in pairs]
    return ScalarRow(name, len(pairs), min(steps), max(steps), pairs[-1][1])


def _kept_graph(run: Run) -> Graph | None:
    return Graph.from_dict(run.manifest["graph"]) if "graph" in run.manifest else None


def _alert_graph(graph: Graph | None, alerts: Sequence[Alert], histories: Mapping[str, History]) -> Graph | None:
    if graph is None:
        return None
    values, column = overlay_of(list(alerts)) if alerts else overlay_of(dict(histories), column="grad_norm")
    return graph.colored(values, column=column)


def training_report(run: Run, *, title: str | None = None, max_layers: int = 64) -> TrainingReport:
    """Deprecated spelling of ``build_training_report``."""
    warn_renamed("hookscope.train.page.training_report", "hookscope.build_training_report")
    return build_training_report(run, title=title, max_layers=max_layers)


@draws_page(TrainingReport)
def render_training(report: TrainingReport) -> str:
    """The report as one self-contained HTML page."""
    jinja2 = require("jinja2")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(png=data_uri, num=_number, percent=lambda v: "–" if v is None or _nan(v) else f"{100 * v:.1f}%")
    source = resources.files("hookscope").joinpath(TEMPLATE).read_text(encoding="utf-8")
    drawn = None if report.graph is None else require("markupsafe").Markup(graph_html(report.graph))
    html: str = env.from_string(source).render(report=report, graph=drawn)
    return html


def write_training_report(report: TrainingReport, out: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write ``out/index.html`` (replacing ``out`` only when complete, and only with ``force``)."""
    return write_page(lambda: render_training(report), out, force=force)


LAST = ("grad_norm", "update_ratio", "dead", "act_std")  # the table's columns of each layer's last row


def training_table(report: TrainingReport) -> str:
    """A row per layer: its type and the ``LAST`` statistics of its last logged row."""
    rows = [["layer", "type", "step", *LAST]]
    for layer in report.layers:
        step = layer.last.get("step")
        cells = [layer.marks.get(c) or _number(layer.last.get(c)) for c in LAST]
        rows.append([layer.name, layer.type, "–" if step is None else str(int(step)), *cells])
    return "\n".join(columns(rows, right=range(2, len(rows[0]))))


@shows_as(TrainingReport, table=training_table)
def training_html(report: TrainingReport) -> str:
    """The notebook view: the run, its alerts and the page's charts."""
    body = note(
        f"{report.model}: {report.steps:,} steps, {report.logged} logged (every {report.every}), {report.ended}"
    )
    body += note(f"first non-finite value (nan_guard): {report.ended_on}") if report.ended_on is not None else ""
    for alert in report.alerts[:10]:
        body += note(str(alert))
    body += note("no alert") if not report.alerts else ""
    body += more(min(len(report.alerts), 10), len(report.alerts), "alerts")
    for row in report.scalars:
        span = f"steps {row.first}..{row.last}, last {_number(row.last_value)}"
        body += note(f"scalar {row.name}: {row.values} values, {span}")
    for chart in report.charts:
        body += figure(chart.png, f"{chart.title}: {chart.caption}", width=560)
    return view(body, title=report.title)


def _loss_chart(scalars: dict[str, list[tuple[int, float]]]) -> tuple[Chart, ...]:
    """The loss over the steps, first on the page, when the run logged one (``w.log(loss=...)``)."""
    pairs = scalars.get("loss", [])
    if not pairs:
        return ()
    steps, values = [s for s, _ in pairs], [v for _, v in pairs]
    png = curves_png({"loss": (steps, values)}, title="loss")
    return (Chart("Loss", png, f"the scalar loss of w.log, {len(pairs)} values"),)


def _charts(histories: dict[str, History], band: tuple[float, float], first: Alert | None) -> tuple[Chart, ...]:
    marks = [(shown(first.module), first.step)] if first is not None else []
    with_params = {n: h for n, h in histories.items() if any(not _nan(v) for v in h["grad_norm"])}
    with_units = {n: h for n, h in histories.items() if any(v > 0 for v in h["zeros"])}  # NaN > 0 is False
    charts = []
    if with_params:
        grads = {n: (h.steps, h["grad_norm"]) for n, h in with_params.items()}
        charts.append(
            Chart(
                "Parameter-gradient norm",
                curves_png(grads, title="parameter-gradient norm (log)", log=True, marks=marks),
                "one line per layer, in model order (dark: first, yellow: last)",
            )
        )
        ratios = {n: (h.steps, h["update_ratio"]) for n, h in with_params.items()}
        charts.append(
            Chart(
                "Update ratio",
                curves_png(ratios, title="update |dw| / |w| (log)", log=True, band=band),
                f"the shaded band {band[0]:g}..{band[1]:g} is healthy (about 1e-3 is the rule of thumb)",
            )
        )
    if with_units:
        dead = {n: (h.steps, h["dead"]) for n, h in with_units.items()}
        charts.append(
            Chart(
                "Dead units",
                curves_png(dead, title="fraction of dead units"),
                "units zero for every sample over the dead window",
            )
        )
    if with_params:
        names = list(with_params)
        steps = sorted({s for h in with_params.values() for s in h.steps})
        grid = [[_by_step(h, "grad_norm").get(s, math.nan) for s in steps] for h in with_params.values()]
        mark = (shown(first.module), first.step) if first is not None else None
        charts.append(
            Chart(
                "Layers x steps",
                heatmap_png(names, steps, grid, title="parameter-gradient norm, log10", mark=mark),
                "each row a layer, each column a logged step; blue: exactly zero; blank: not finite or not logged",
            )
        )
    return tuple(charts)  # fmt: skip


def _row(history: History, frozen: bool) -> LayerRow:
    """A layer's last row; ``frozen``: every parameter of it was frozen (``Watch.frozen``), so it has no gradient."""
    values = history["grad_norm"] if any(not _nan(v) for v in history["grad_norm"]) else history["grad_output_norm"]
    drawn = [v for v in values if not _nan(v)]
    last = history.last()
    marks = {c: "undefined" for c, steps in history.undefined.items() if last and int(last["step"]) in steps}
    marks.update({c: "frozen" for c in ("grad_norm", "update_ratio") if frozen})
    spark = sparkline_png(values, log=True) if drawn else None
    return LayerRow(shown(history.name), history.type, last, spark, marks)


def _by_step(history: History, column: str) -> dict[int, float]:
    return dict(zip(history.steps, history[column], strict=True))


def _nan(value: float) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _created(stored: str) -> str:
    try:
        return human_time(datetime.datetime.fromisoformat(stored))
    except ValueError:
        return stored


def _number(value: float | int | None) -> str:
    return "–" if value is None or _nan(value) else format_number(value)
