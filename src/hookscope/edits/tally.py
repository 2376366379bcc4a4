"""What each edit did: calls applied, elements changed, relative change; and ``Edit.report()``.

A ``Tally`` belongs to one (edit, module) pair. Each application adds, as tensors on the
device (no wait for it inside the forward pass): the elements that changed, ``|y' - y|^2`` and
``|y|^2`` (float64). The report reads them once: the relative change is
``sqrt(sum |y' - y|^2) / sqrt(sum |y|^2)`` over every call applied, a Frobenius-norm ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..base.display import Shows, shows_as, table_of
from ..base.words import columns
from ..stats.norms import square_sum
from ..viz.fragments import note, table, view
from .edit_op import EditOp


@dataclass(eq=False)
class Tally:
    """The running account of one edit at one module (``problems``: why it did not take effect)."""

    site: str
    op: EditOp
    selector: str
    calls: list[int] = field(default_factory=list)  # indices of the calls it was applied to
    elements: int = 0
    changed: Tensor | None = None
    diff2: Tensor | None = None
    base2: Tensor | None = None
    problems: list[str] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)

    def add(self, before: Tensor, after: Tensor, call: int, key: str) -> None:
        """One application: ``before`` became ``after`` (read now, before a later in-place op can change them)."""
        with torch.no_grad():
            old, new = before.detach(), after.detach()
            changed = (old != new).sum()
            diff2, base2 = square_sum(new - old), square_sum(old)
        self.changed = changed if self.changed is None else self.changed + changed
        self.diff2 = diff2 if self.diff2 is None else self.diff2 + diff2
        self.base2 = base2 if self.base2 is None else self.base2 + base2
        self.elements += old.numel()
        if call not in self.calls:  # a gradient edit sees its calls in backward order
            self.calls.append(call)
        self.keys.add(key)

    def problem(self, why: str) -> None:
        if why not in self.problems:
            self.problems.append(why)

    def row(self) -> EditRow:
        changed = int(self.changed) if self.changed is not None else 0
        diff, base = (math.sqrt(float(t)) if t is not None else 0.0 for t in (self.diff2, self.base2))
        relative = diff / base if base > 0 else (0.0 if diff == 0 else math.inf)
        note_ = "; ".join(self.problems)
        if not note_ and self.calls and changed == 0:
            note_ = "already zero: nothing to change" if self.op.zeroes else "changed nothing"
        key = ", ".join(sorted(self.keys)) or (self.op.key or "")
        return EditRow(
            self.site, repr(self.op), self.op.kind, key, tuple(self.calls), changed, self.elements, relative, note_
        )

    def failure(self) -> str | None:
        """Why this edit did not take effect, or None when it did (an already-zero zero-ablation did)."""
        if self.problems:
            return f"{self.op!r} at {self.site!r} ({self.op.kind}): {'; '.join(self.problems)}"
        if self.calls and not self.op.zeroes and self.changed is not None and int(self.changed) == 0:
            return f"{self.op!r} at {self.site!r} ({self.op.kind}): it changed nothing in {len(self.calls)} call(s)"
        return None


@dataclass(frozen=True)
class EditRow:
    """One line of ``Edit.report()``."""

    site: str
    edit: str
    kind: str
    key: str
    calls: tuple[int, ...]  # the indices of the calls edited
    changed: int  # elements whose value changed
    elements: int  # elements the edit saw
    relative: float  # |y' - y| / |y| over the calls edited
    note: str  # "" when it took effect as asked


class EditReport(Shows):
    """Every edit at every module it reached: ``str()`` is a table, ``rows`` the figures."""

    def __init__(self, rows: list[EditRow]) -> None:
        self.rows = rows

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> EditRow:
        return self.rows[index]

    def __repr__(self) -> str:
        return str(self)

    def table(self) -> str:
        """A row per edit and module: kind, key, calls, elements changed, relative change, note (text)."""
        return table_of(self)

    def __str__(self) -> str:
        header = ("site", "edit", "kind", "key", "calls", "changed", "relative", "note")
        lines = [header, *(_cells(row) for row in self.rows)]
        return "\n".join(columns(lines, right=(4, 5, 6)))


def _cells(row: EditRow) -> tuple[str, ...]:
    calls = str(len(row.calls)) if len(row.calls) != 1 else f"1 (#{row.calls[0]})"
    changed = f"{row.changed:,}/{row.elements:,}"
    return (row.site, row.edit, row.kind, row.key, calls, changed, f"{row.relative:.3g}", row.note)


@shows_as(EditReport, table=str)
def _edit_report_html(report: EditReport) -> str:
    header = ("site", "edit", "kind", "key", "calls", "changed", "relative", "note")
    body = table(header, [_cells(row) for row in report.rows], numeric=(4, 5, 6))
    if not report.rows:
        body = note("no edit")
    return view(body, title=f"Edit report: {len(report.rows)} edit(s)")
