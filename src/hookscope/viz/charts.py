"""Pictures of a capture as PIL images: a grid of histograms, a gradient-flow chart, one histogram of counts.

A ``GradientFlow`` (``stats.gradient_flow``) is registered here: ``.table()``, ``.plot()`` (the
gradient-flow chart) and its notebook view.

matplotlib and Pillow are imported inside the functions (``pip install 'hookscope[viz]'``).
Figures are built on ``matplotlib.figure.Figure`` and rasterised by the Agg canvas, never
through pyplot: the user's backend and current figure are left alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..base.display import shows_as
from ..base.optional import require
from ..base.words import columns as text_columns
from ..core.kinds import Kind, per_call
from ..core.records import Record, forward_order
from ..errors import OptionError
from ..stats.gradient_flow import FlowRow, GradientFlow, gradient_flow
from ..stats.summary import Summary, summarize
from .fonts import DPI, FONT, TITLE, uniform
from .fragments import image_tag, note, table, view

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from PIL.Image import Image

PANEL_INCHES = (2.6, 2.0)  # one histogram of the grid
NORMAL, VANISHING, EXPLODING = "tab:blue", "tab:orange", "tab:red"


def histogram_plot(
    tensors: Mapping[str, Tensor] | Mapping[str, Record],
    *,
    kind: Kind = "output",
    bins: int = 50,
    log: bool = False,
    columns: int | None = None,
) -> Image:
    """A grid of histograms, one per tensor (or per site of a capture), titled with mean and std.

    From a capture (any ``Mapping[str, Record]``), each site in forward order shows the tensor of
    ``kind`` of every call, all calls pooled; a site whose value holds several tensors (a tuple,
    a dict) gets a panel per key, titled ``site key``; with ``kind="param_grad"`` each parameter
    gets its own panel, from the latest backward pass. NaN and Inf are left out of the bars and counted in the title.
    ``log`` puts the counts on a log scale; ``columns`` defaults to about a square grid.

    Args:
        tensors: name -> tensor, or a capture (name -> ``Record``).
        kind: the kind plotted from a capture (default ``output``).
        bins: bars per histogram.
        log: put the counts on a log scale.
        columns: panels per row; None is about a square grid.

    Returns:
        A PIL image of the grid.

    Raises:
        OptionError: no tensor or site holds ``kind``.
        MissingDependencyError: matplotlib or Pillow is not installed.
    """
    panels = _panels(tensors, kind)
    if not panels:
        raise OptionError(f"nothing to plot: no site holds {kind}; pass kinds=(..., {kind!r}) to hookscope.capture")
    return figure_image(_histogram_figure(panels, bins=bins, log=log, columns=columns))


def gradient_flow_plot(
    capture_or_rows: Mapping[str, Record] | Sequence[FlowRow],
    *,
    kind: Kind = "grad_output",
    vanish: float = 1e-6,
    explode: float = 1e3,
) -> Image:
    """Mean and max ``|gradient|`` per layer, on a log scale, with the vanishing and exploding lines.

    Takes a capture (``stats.gradient_flow(capture, kind=kind)`` is computed) or its rows. A bar
    below ``vanish`` is orange, one above ``explode`` red; a zero gradient is an orange x on
    the floor. The figure widens with the number of layers.

    Args:
        capture_or_rows: a capture (name -> ``Record``) that ran a backward pass, or the rows of
            ``gradient_flow``.
        kind: the gradient kind read from a capture (default ``grad_output``).
        vanish: mean ``|gradient|`` below this is vanishing (orange).
        explode: max ``|gradient|`` above this is exploding (red).

    Returns:
        A PIL image of the chart.

    Raises:
        OptionError: the thresholds do not satisfy ``0 < vanish < explode``, ``kind`` is not a
            gradient kind, or no site holds ``kind``.
        MissingDependencyError: matplotlib or Pillow is not installed.
    """
    rows = gradient_flow(capture_or_rows, kind=kind) if isinstance(capture_or_rows, Mapping) else capture_or_rows
    if not 0 < vanish < explode:
        raise OptionError(f"thresholds must satisfy 0 < vanish < explode, got vanish={vanish}, explode={explode}")
    if not rows:
        raise OptionError(
            f"nothing to plot: no site holds {kind}; capture with kinds=(..., {kind!r}) and run backward() in the block"
        )
    return figure_image(_flow_figure(list(rows), vanish=vanish, explode=explode, kind=kind))


def counts_plot(counts: Sequence[int], edges: Sequence[float], *, title: str = "", log: bool = False) -> Image:
    """One histogram of ``counts`` between ``edges`` (a summary's ``histogram``); ``log`` counts on a log scale."""
    fig = new_figure(*PANEL_INCHES)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=FONT)
    ax.tick_params(labelsize=6)
    if not counts:
        ax.text(0.5, 0.5, "no finite values", ha="center", va="center", transform=ax.transAxes, fontsize=FONT)
        return figure_image(fig)
    ax.stairs(list(counts), list(edges), fill=True, color=NORMAL, alpha=0.85)
    if log:
        ax.set_yscale("log")
    ax.margins(x=0)
    ax.locator_params(axis="x", nbins=5)
    return figure_image(fig)


# -- histograms ------------------------------------------------------------------------------
def _panels(source: Mapping[str, Tensor] | Mapping[str, Record], kind: Kind) -> dict[str, Tensor]:
    tensors = {name: v for name, v in source.items() if isinstance(v, Tensor)}
    records = {name: v for name, v in source.items() if isinstance(v, Record)}
    if len(tensors) != len(source) and len(records) != len(source):
        name, value = next((n, v) for n, v in source.items() if not isinstance(v, (Tensor, Record)))
        raise OptionError(
            f"histogram_plot expects a capture or a {{name: tensor}} mapping; {name!r} is a {type(value).__name__}"
        )
    return tensors if len(tensors) == len(source) else _site_panels(records, kind)


def _site_panels(records: Mapping[str, Record], kind: Kind) -> dict[str, Tensor]:
    ordered = forward_order(records)
    if not per_call(kind):  # param_grad: held per site
        return {f"{r.name}.{p}": g[-1] for r in ordered for p, g in r.param_grads.items() if g}
    pooled: dict[str, list[Tensor]] = {}
    for record in ordered:
        keys = list(dict.fromkeys(key for call in record.calls for key in call.keys(kind)))
        for key in keys:
            name = record.name if len(keys) == 1 else f"{record.name} {key}"
            pooled[name] = [c.tensors[kind][key].flatten() for c in record.calls if key in c.tensors.get(kind, {})]
    return {name: _cat(ts) for name, ts in pooled.items() if ts}


def _cat(tensors: list[Tensor]) -> Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat([t.to(tensors[0]) for t in tensors])


def _histogram_figure(panels: dict[str, Tensor], *, bins: int, log: bool, columns: int | None) -> Figure:
    if columns is not None and (isinstance(columns, bool) or not isinstance(columns, int) or columns < 1):
        raise OptionError(f"columns must be a positive int or None, got {columns!r}")
    columns = columns or min(len(panels), 8, math.ceil(math.sqrt(len(panels))))
    rows = math.ceil(len(panels) / columns)
    fig = new_figure(PANEL_INCHES[0] * columns, PANEL_INCHES[1] * rows)
    axes = fig.subplots(rows, columns, squeeze=False).flatten()
    for ax, (name, tensor) in zip(axes, panels.items(), strict=False):
        _histogram_panel(ax, name, summarize(tensor, bins=bins, percentiles=()), log=log)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    return fig


def _histogram_panel(ax: Axes, name: str, summary: Summary, *, log: bool) -> None:
    ax.set_title(f"{_shorten(name, 34)}\n{_stat_line(summary)}", fontsize=FONT)
    ax.tick_params(labelsize=6)
    if not summary.histogram.counts:
        ax.text(0.5, 0.5, "no finite values", ha="center", va="center", transform=ax.transAxes, fontsize=FONT)
        return
    ax.stairs(summary.histogram.counts, summary.histogram.edges, fill=True, color=NORMAL, alpha=0.85)
    if log:
        ax.set_yscale("log")
    ax.margins(x=0)
    ax.locator_params(axis="x", nbins=5)
    ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))  # 1e-5 goes in the offset, not each tick
    ax.xaxis.get_offset_text().set_fontsize(FONT)


def _stat_line(summary: Summary) -> str:
    line = f"mean {summary.mean:.3g}  std {summary.std:.3g}"
    bad = [f"{n} {what}" for n, what in ((summary.nan_count, "NaN"), (summary.inf_count, "Inf")) if n]
    return line + ("  (" + ", ".join(bad) + ")" if bad else "")


def _shorten(name: str, width: int) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


# -- gradient flow ---------------------------------------------------------------------------
def _flow_figure(rows: list[FlowRow], *, vanish: float, explode: float, kind: str) -> Figure:
    """The chart behind ``gradient_flow_plot``, before rasterising (tests read its lines)."""
    names = [_shorten(r.name, 40) for r in rows]
    label_inches = 0.08 * max(len(n) for n in names)  # names are rotated under the axis, FONT points
    fig = new_figure(max(6.0, 0.26 * len(rows) + 1.6), 3.6 + label_inches)
    ax = fig.add_subplot()
    floor, top = _flow_limits(rows, vanish, explode)
    for values, width, alpha in (([r.max_abs for r in rows], 0.8, 0.35), ([r.mean_abs for r in rows], 0.5, 1.0)):
        colors = [_flow_color(v, vanish, explode) for v in values]
        heights = [min(max(v, floor), top) - floor if v == v else 0.0 for v in values]  # NaN: no bar
        ax.bar(range(len(rows)), heights, bottom=floor, width=width, color=colors, alpha=alpha)
        zeros = [i for i, v in enumerate(values) if v == 0]
        if zeros:
            ax.scatter(zeros, [floor * 1.5] * len(zeros), marker="x", color=VANISHING, alpha=alpha, zorder=3)
    ax.axhline(vanish, color=VANISHING, linestyle="--", linewidth=1.2)
    ax.axhline(explode, color=EXPLODING, linestyle="--", linewidth=1.2)
    _style_flow_axes(ax, names, floor, top, kind)
    fig.suptitle(f"gradient flow: {kind}, {len(rows)} layers", fontsize=TITLE)
    _flow_legend(ax, vanish, explode)
    return fig


def _flow_limits(rows: list[FlowRow], vanish: float, explode: float) -> tuple[float, float]:
    """A log range that holds every finite, non-zero value and both thresholds, half a decade spare."""
    seen = [v for r in rows for v in (r.mean_abs, r.max_abs) if 0 < v < math.inf]
    low, high = min([*seen, vanish]), max([*seen, explode])
    return 10 ** math.floor(math.log10(low) - 0.5), 10 ** math.ceil(math.log10(high) + 0.5)


def _flow_color(value: float, vanish: float, explode: float) -> str:
    if value < vanish:
        return VANISHING
    return EXPLODING if value > explode or value != value else NORMAL


def _style_flow_axes(ax: Axes, names: list[str], floor: float, top: float, kind: str) -> None:
    ax.set_yscale("log")
    ax.set_ylim(floor, top)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=FONT)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_ylabel(f"|{kind}|", fontsize=FONT)
    ax.grid(axis="y", which="major", alpha=0.3)


def _flow_legend(ax: Axes, vanish: float, explode: float) -> None:
    patches: Any = require("matplotlib.patches")
    lines: Any = require("matplotlib.lines")
    handles = [
        patches.Patch(color=NORMAL, alpha=0.35, label="max |grad|"),
        patches.Patch(color=NORMAL, label="mean |grad|"),
        lines.Line2D([], [], color=VANISHING, linestyle="--", label=f"vanishing: below {vanish:.0e}"),
        lines.Line2D([], [], color=EXPLODING, linestyle="--", label=f"exploding: above {explode:.0e}"),
    ]
    ax.legend(handles=handles, fontsize=FONT, ncols=2, loc="lower left", bbox_to_anchor=(0, 1.02), frameon=False)


# -- matplotlib and Pillow, lazily -----------------------------------------------------------
def new_figure(width: float, height: float) -> Figure:
    """A matplotlib figure of ``width`` x ``height`` inches at ``DPI``, laid out by matplotlib."""
    figure: Any = require("matplotlib.figure")
    fig: Figure = figure.Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    return fig


def figure_image(fig: Figure) -> Image:
    """``fig`` drawn, as an RGB PIL image."""
    agg: Any = require("matplotlib.backends.backend_agg")
    pil: Any = require("PIL.Image")
    uniform(fig)
    canvas = agg.FigureCanvasAgg(fig)
    canvas.draw()
    image: Image = pil.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    return image.convert("RGB")


# -- a GradientFlow's table, picture and notebook view -----------------------------------------
FLOW_HEADER = ("site", "mean |grad|", "max |grad|", "elements")


def _flow_cells(row: FlowRow) -> tuple[str, ...]:
    return (row.name or "(model)", f"{row.mean_abs:.4g}", f"{row.max_abs:.4g}", f"{row.count:,}")


def flow_table(flow: GradientFlow) -> str:
    """A row per site: mean and max ``|gradient|`` of the flow's kind, and the elements pooled."""
    if not flow.rows:
        return f"no site holds {flow.kind}"
    lines = text_columns([FLOW_HEADER, *(_flow_cells(r) for r in flow.rows)], right=(1, 2, 3))
    return "\n".join([*lines, f"kind: {flow.kind}"])


def flow_plot(flow: GradientFlow, *, vanish: float = 1e-6, explode: float = 1e3) -> Image:
    return gradient_flow_plot(flow, kind=flow.kind, vanish=vanish, explode=explode)


@shows_as(GradientFlow, table=flow_table, plot=flow_plot)
def flow_html(flow: GradientFlow) -> str:
    """The gradient-flow chart above its table."""
    if not flow.rows:
        return view(note(f"no site holds {flow.kind}"), title="Gradient flow")
    body = image_tag(flow_plot(flow), alt=f"gradient flow of {flow.kind}", width=None)
    body += table(FLOW_HEADER, [_flow_cells(r) for r in flow.rows], numeric=(1, 2, 3))
    return view(body, title=f"Gradient flow: {flow.kind} at {len(flow.rows)} sites")
