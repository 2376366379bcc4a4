"""How ``Directions`` show themselves: a text table, a notebook view and a report section."""

from __future__ import annotations

import math
from pathlib import Path

from ..base.display import shows_as
from ..base.words import columns
from ..viz.fragments import Safe, note, table, view
from .direction import Direction, Directions

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


def _place(found: Directions) -> tuple[str, str]:
    return "directions", "Directions by site"


@shows_as(Directions, table=directions_table, section=_place)
def directions_html(found: Directions) -> Safe:
    """The table and the provenance, one self-contained block."""
    body = table(HEADER, [_cells(d) for d in found.values()], numeric=range(2, len(HEADER)))
    said = "AUC: the held-out groups' projections on the direction (0.5: no separation, 1: complete)"
    return view(body + note(_said(found)) + note(said), title=f"Directions at {len(found)} sites")
