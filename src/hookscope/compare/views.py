"""How a ``Similarity`` and a ``Divergence`` show themselves: text tables, pictures, notebook views.

matplotlib and Pillow are imported when a picture is drawn.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..base.display import shows_as
from ..base.words import columns, shorten
from ..viz.charts import figure_image, new_figure
from ..viz.fonts import FONT
from ..viz.fragments import Safe, image_tag, note, table, view
from .numerics import Divergence, Site
from .similarity import Similarity

if TYPE_CHECKING:
    from PIL.Image import Image

MAX_LABELS = 40  # units named on an axis; more are drawn unnamed


def similarity_table(sim: Similarity) -> str:
    """A's units down, B's across, each named (shortened), 3 decimals."""
    header = [f"A \\ B ({sim.measure})", *(shorten(c) for c in sim.columns)]
    rows = [[name, *(_fixed(float(v)) for v in sim.values[i])] for i, name in enumerate(sim.rows)]
    return "\n".join([*columns([header, *rows], right=range(1, len(header))), _summary(sim)])


def _summary(sim: Similarity) -> str:
    return f"{sim.measure} over {sim.samples:,} inputs in {sim.batches} batches"


def _fixed(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3f}"


def similarity_plot(sim: Similarity, *, cmap: str = "magma") -> Image:
    """The heatmap, with the diagonal (same-named units) as a line beside it when there is one."""
    diagonal = sim.diagonal()
    rows, cols = len(sim.rows), len(sim.columns)
    fig = new_figure(3.2 + 0.24 * cols + (3.2 if diagonal else 0), 2.0 + 0.24 * rows)
    grid = fig.add_gridspec(1, 2 if diagonal else 1, width_ratios=[max(cols, 4), 6] if diagonal else None)
    ax = fig.add_subplot(grid[0, 0])
    shown = ax.imshow(sim.values.numpy(), cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    _label(ax, sim)
    bar = fig.colorbar(shown, ax=ax, shrink=0.8)
    bar.set_label(sim.measure.upper(), fontsize=FONT)
    bar.ax.tick_params(labelsize=FONT)
    if diagonal:
        line = fig.add_subplot(grid[0, 1])
        line.plot(range(len(diagonal)), list(diagonal.values()), marker="o", markersize=3, color="#4f46e5")
        line.set_ylim(min(0.0, *diagonal.values()), 1.02)
        line.set_xticks(range(len(diagonal)), [shorten(n) for n in diagonal] if len(diagonal) <= MAX_LABELS else [])
        line.tick_params(axis="x", labelrotation=90, labelsize=FONT)
        line.tick_params(axis="y", labelsize=FONT)
        line.set_title("same unit in A and B", fontsize=FONT)
    return figure_image(fig)


def _label(ax: Any, sim: Similarity) -> None:
    for names, ticks in ((sim.rows, ax.set_yticks), (sim.columns, ax.set_xticks)):
        ticks(range(len(names)), [shorten(n) for n in names] if len(names) <= MAX_LABELS else [], fontsize=FONT)
    ax.tick_params(axis="x", labelrotation=90)
    ax.set_ylabel("A", fontsize=FONT)
    ax.set_xlabel("B", fontsize=FONT)
    ax.set_title(f"{sim.measure.upper()}, {sim.samples:,} inputs", fontsize=FONT)


@shows_as(
    Similarity,
    table=similarity_table,
    plot=similarity_plot,
    section=lambda sim: (f"similarity-{sim.measure}", f"Similarity ({sim.measure.upper()})"),
)
def similarity_html(sim: Similarity) -> Safe:
    """The heatmap and the matrix, one self-contained block."""
    header = ["A \\ B", *(shorten(c) for c in sim.columns)]
    rows = [[name, *(_fixed(float(v)) for v in sim.values[i])] for i, name in enumerate(sim.rows)]
    body = image_tag(similarity_plot(sim), alt=f"{sim.measure} heatmap", width=None)
    body = Safe(body + table(header, rows, numeric=range(1, len(header))) + note(_summary(sim)))
    return view(body, title=f"Similarity ({sim.measure}): {len(sim.rows)} x {len(sim.columns)} units")


DIVERGENCE_HEADER = ("site", "shape", "relative", "cosine", "max |d|", "at")


def _cells(row: Site) -> list[str]:
    at = ", ".join(map(str, row.where))
    return [
        row.name,
        "x".join(map(str, row.shape)),
        f"{row.relative:.3g}",
        f"{row.cosine:.6f}",
        f"{row.max_abs:.3g}",
        f"({at})",
    ]


def divergence_table(div: Divergence) -> str:
    """A row per site in forward order: relative L2 error, cosine, max |difference| and its index."""
    rows = [list(DIVERGENCE_HEADER), *(_cells(r) for r in div.sites)]
    return "\n".join([*columns(rows, right=range(2, 6)), *div.notes])


def divergence_plot(div: Divergence, *, rtol: float | None = None) -> Image:
    """The relative error of each site in forward order, on a log scale (``rtol``: a dashed line there)."""
    names = [r.name for r in div.sites]
    values = [max(r.relative, 1e-12) for r in div.sites]
    fig = new_figure(max(4.0, 1.6 + 0.16 * len(names)), 3.2)
    ax = fig.add_subplot()
    ax.plot(range(len(values)), values, marker="o", markersize=3, color="#4f46e5")
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), [shorten(n) for n in names] if len(names) <= 2 * MAX_LABELS else [], fontsize=FONT)
    ax.tick_params(axis="x", labelrotation=90)
    ax.tick_params(axis="y", labelsize=FONT)
    ax.set_ylabel("|B - A| / |A|", fontsize=FONT)
    ax.set_title("relative error per site, forward order", fontsize=FONT)
    if rtol is not None:
        ax.axhline(rtol, color="#b42318", linestyle="--", linewidth=1, label=f"rtol {rtol:g}")
        ax.legend(fontsize=FONT, frameon=False)
    return figure_image(fig)


@shows_as(
    Divergence,
    table=divergence_table,
    plot=divergence_plot,
    section=lambda div: ("divergence", "Divergence of two models"),
)
def divergence_html(div: Divergence) -> Safe:
    """The chart and the table, one self-contained block."""
    body = image_tag(divergence_plot(div), alt="relative error per site", width=None)
    body = Safe(body + table(DIVERGENCE_HEADER, [_cells(r) for r in div.sites], numeric=range(2, 6)))
    for line in div.notes:
        body = Safe(body + note(line))
    return view(body, title=f"Divergence over {len(div.sites)} sites")
