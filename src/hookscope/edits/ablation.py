"""A prediction before and after an ablation, as a section of a report page.

::

    report = build_report(model, x, sections=[effects, ablation(model, x, {"layer4": edits.zero(channels=[3])})])

``ablation`` runs the model
twice under no_grad, bare and under ``hookscope.edit``, and lays the top-k classes of each image
side by side, with the edit's report below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..core.select import Selector
from ..errors import OptionError
from ..explain.targets import logits
from ..report.content import Guess, Section, predictions
from ..viz.fragments import Safe, escape, table, view
from .edit import EditSpec, edit

MAX_IMAGES = 8  # images whose predictions are laid side by side


def ablation(
    model: nn.Module,
    x: Tensor,
    plan: Mapping[Selector, EditSpec],
    *,
    labels: Sequence[str] | None = None,
    top_k: int = 5,
    output: str | None = None,
    title: str = "",
) -> Section:
    """The top-k classes of each image without and with the edits of ``plan``, side by side."""
    with torch.no_grad():
        before = logits(model(x), output).detach()
        with edit(model, plan) as ed:
            after = logits(model(x), output).detach()
    if before.dim() != 2:
        raise OptionError(f"an ablation's prediction needs a (batch, classes) output, got {tuple(before.shape)}")
    rows = []
    shown = slice(0, MAX_IMAGES)
    for b_, a_ in zip(predictions(before[shown], labels, top_k), predictions(after[shown], labels, top_k), strict=True):
        pairs = zip(_cells(b_.guesses, labels), _cells(a_.guesses, labels), strict=True)
        rows += [(f"image {b_.image}" if rank == 0 else "", rank + 1, *b, *a) for rank, (b, a) in enumerate(pairs)]
    header = ("image", "rank", "before", "p before", "after", "p after")
    edits = table(("site", "edit", "kind", "changed", "relative"), [_edit_cells(row) for row in ed.report()])
    lead = f"<p>{escape(title or 'The prediction without and with the ablation, under no_grad.')}</p>"
    body = Safe(lead + table(header, rows, numeric=(1, 3, 5)) + "<p>The edits, as applied:</p>" + edits)
    return Section("ablation", "Ablation: prediction before and after", str(view(body)))


def _cells(guesses: Sequence[Guess], labels: Sequence[str] | None) -> list[tuple[str, str]]:
    """(class, probability) cells: ``cat (3)`` with labels, ``class 3`` without."""
    named = labels if labels is not None else ()
    return [
        (f"{g.name} ({g.index})" if g.index < len(named) else g.name, f"{100 * g.probability:.1f}%") for g in guesses
    ]


def _edit_cells(row: Any) -> tuple[str, ...]:
    return (row.site, row.edit, row.kind, f"{row.changed:,}/{row.elements:,}", f"{row.relative:.3g}")
