"""How ``Directions`` show themselves: a text table, a picture (held-out AUC by site), a notebook view and a section."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from ..base.display import shows_as
from ..base.words import columns, shorten
from ..viz.charts import figure_image, new_figure
from ..viz.fragments import Safe, image_tag, note, table, view
from .direction import Direction, Directions

if TYPE_CHECKING:
    from PIL.Image import Image

HEADER = ("site", "method", "norm", "held-out AUC", "examples", "groups")


def _cells(d: Direction) -> list[str]:
    auc = "n/a" if math.isnan(d.auc) else f"{d.auc:.3f}"
    return [d.site, d.method, f"{d.norm:.4g}", auc, f"{d.examples[0]:,}+{d.examples[1]:,}", f"{d.groups:,}"]


def _said(found: Directions) -> str:
    """The provenance in one line: the store, its hash, the rows and the split."""
    p = found.provenance
    if "store" not in p:
        return f"read from {p.get('source') or p.get('file') or 'vectors given'}"
    paired = ", paired" if p.get("pairs") else ""
    return (f"from {Path(p['store']).name} (manifest sha256 {str(p.get('store_hash', ''))[:12]}), {p.get('rows', 0):,} "
            f"rows: {p.get('labelled_1', 0):,} toward, {p.get('labelled_0', 0):,} away{paired}; held out: "
            f"{p.get('holdout')} of the groups, seed {p.get('seed')}")  # fmt: skip


def directions_table(found: Directions) -> str:
    """A row per site; the provenance below."""
    lines = columns([list(HEADER), *map(_cells, found.values())], right=range(2, len(HEADER)))
    return "\n".join([*lines, _said(found)])


def directions_plot(found: Directions) -> Image:
    """The held-out AUC per site, in order (0.5, no separation, dashed): where the labels part along a line."""
    sites = list(found.values())
    fig = new_figure(max(3.5, 0.55 * len(sites) + 1.5), 2.8)
    ax = fig.add_subplot()
    steps = range(len(sites))
    ax.plot(steps, [d.auc for d in sites], marker="o", label="held-out AUC")
    ax.axhline(0.5, linestyle="--", color="grey", label="no separation")
    ax.set_xticks(list(steps), [shorten(d.site) for d in sites], rotation=45, ha="right", fontsize=7)
    ax.set_ylim(0, 1.02)
    ax.set_title("direction's separation by site", fontsize=9)
    ax.legend(fontsize=7)
    return figure_image(fig)


def _place(found: Directions) -> tuple[str, str]:
    return "directions", "Directions by site"


@shows_as(Directions, table=directions_table, plot=directions_plot, section=_place)
def directions_html(found: Directions) -> Safe:
    """The picture, the table and the provenance, one self-contained block."""
    body = Safe(image_tag(found.plot(), alt="held-out AUC by site", width=None)
                + table(HEADER, [_cells(d) for d in found.values()], numeric=range(2, len(HEADER))))  # fmt: skip
    said = "AUC: the held-out groups' projections on the direction (0.5: no separation, 1: complete)"
    return view(body + note(_said(found)) + note(said), title=f"Directions at {len(found)} sites")
