"""How a vLLM edit report (``RequestEdits``) shows itself: a text table and a notebook view."""

from __future__ import annotations

from ..base.display import shows_as
from ..base.words import columns
from ..viz.fragments import note, table, view
from .result import RequestEditRow, RequestEdits

HEADER = ("request", "site", "edit", "key", "call", "step", "changed", "relative")


def _cells(row: RequestEditRow) -> tuple[str, ...]:
    changed = f"{row.changed:,}/{row.elements:,}"
    return (row.request, row.site, row.edit, row.key, str(row.call), row.step, changed, f"{row.relative:.3g}")


def edits_table(report: RequestEdits) -> str:
    """A row per (request, site, edit, call); the problems a worker noted below."""
    lines = columns([HEADER, *(_cells(r) for r in report.rows)], right=(4, 6, 7))
    return "\n".join([*lines, *(f"{site}: {why}" for site, why in report.problems)])


@shows_as(RequestEdits, table=edits_table)
def _edits_html(report: RequestEdits) -> str:
    body = table(HEADER, [_cells(r) for r in report.rows], numeric=(4, 6, 7)) if report.rows else note("no edit")
    return view(body, title=f"vLLM edit report: {len(report.rows)} call(s) edited")
