"""The report's view of ``TopExamples``: per unit, the inputs it fires on most and its histogram.

::

    top = hookscope.TopExamples.read(hookscope.load("top.hookscope"), "layer4")
    top                                              # in a notebook: this view
    build_report(model, x, sections=[top_examples_section(top, inputs=images)])
    hookscope report --from top.hookscope            # every site of such a store, without inputs

Each unit (the ``units`` with the largest best value) gets one block: the histogram of each input's
peak value of the unit, then its ``k`` best activations as cards (value, batch, row, where). Given
the ``inputs`` in store order ((N, C, H, W) images), a card shows the patch of the input under the
map cell, three cells wide: the cell's own stride-sized square and a cell either side, an
approximation of its receptive field (the true one needs the model). Given ``tokens`` (a list of
token lists in store order), a card shows the tokens around the position, the one that fired shaded.
Without either it says where the example is; a store holds no inputs.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..base.display import shows_as
from ..core.capture import capture
from ..errors import CaptureWarning, ShapeError, StoreError
from ..report.content import Section
from ..store.reader import Run
from ..viz.charts import counts_plot
from ..viz.fragments import Safe, escape, image_tag, note, view
from ..viz.highlight import token_html
from ..viz.images import to_pil
from .top import TopExamples

UNITS = 8  # units a view shows, largest best value first
BINS = 24
WINDOW = 5  # tokens shown either side of the one that fired
CSS = """
.hs-top-unit { border-top: 1px solid #ddd; padding: 6px 0; }
.hs-top-row { display: flex; flex-wrap: wrap; gap: 6px; align-items: flex-start; }
.hs-top-card { font-size: 11px; max-width: 160px; overflow-wrap: anywhere; }
.hs-top-card img { display: block; image-rendering: pixelated; }
"""


def top_examples_html(top: TopExamples, *, inputs: Tensor | None = None,
                      tokens: Sequence[Sequence[str]] | None = None, units: int = UNITS,
                      model: nn.Module | None = None) -> Safe:  # fmt: skip
    """The view: one block per unit (see the module docstring)."""
    _check(top, inputs, tokens)
    blocks = [_unit(top, unit, inputs, tokens, model) for unit in top.ranked()[:units]]
    moved = top.label == "difference"
    said = "per unit, the inputs whose peak moved most between the two runs (signed change)" if moved else (
        f"the {top.k} activations each unit fires on most, over {top.peaks.shape[1]:,} inputs")  # fmt: skip
    shown = note(f"{min(units, top.units)} of {top.units} units shown, the largest best value first")
    return view(
        note(said) + Safe("".join(blocks)) + shown,
        title=f"{'Changed' if moved else 'Top'} examples of {top.site}",
        css=CSS,
    )


def _place(top: TopExamples) -> tuple[str, str]:
    """Where a ``TopExamples`` goes on a report page: its anchor and its heading."""
    moved = top.label == "difference"
    anchor = ("change-" if moved else "top-") + "".join(c if c.isalnum() else "-" for c in top.site)
    return anchor, f"{'Change A to B' if moved else 'Top examples'}: {top.site or '(model)'}"


# the notebook view (no inputs, the first units), and the section it makes of a report page
shows_as(TopExamples, section=_place)(lambda top: top_examples_html(top))


def top_examples_section(top: TopExamples, *, inputs: Tensor | None = None,
                         tokens: Sequence[Sequence[str]] | None = None, units: int = UNITS,
                         model: nn.Module | None = None) -> Section:  # fmt: skip
    """The view as a section of a report page (``build_report(sections=[...])``, ``report --from``)."""
    html = top_examples_html(top, inputs=inputs, tokens=tokens, units=units, model=model)
    return Section(*_place(top), str(html))


def top_sections(run: Run, against: Run | None = None) -> list[Section]:
    """A section per site of a store extracted with ``reduce=top_examples(k)`` (none for another store);
    with ``against`` (the same inputs, checkpoint A), a second per site: the change from it to ``run``."""
    if not str(run.config.get("reduce", "")).startswith("top_examples(") or not run.batches:
        if against is not None:
            used = run.config.get("reduce")
            raise StoreError(f"--against compares two top_examples stores, and {run.path} is not one (its reduce "
                             f"is {used!r}); extract both with reduce=hookscope.reducers.top_examples(k)")  # fmt: skip
        return []
    sections = []
    for site in run:
        top = TopExamples.read(run, site)
        sections.append(top_examples_section(top))
        if against is not None:
            sections.append(top_examples_section(top.difference(TopExamples.read(against, site))))
    return sections


def _unit(top: TopExamples, unit: int, inputs: Tensor | None, tokens: Sequence[Sequence[str]] | None,
          model: nn.Module | None) -> str:  # fmt: skip
    counts, edges = top.histogram(unit, BINS)
    histogram = image_tag(counts_plot(counts, edges, title=f"unit {unit}: peak per input"), alt=f"unit {unit}")
    cards = [
        _card(top, unit, rank, inputs, tokens, model) for rank in range(top.k) if int(top.batches[unit, rank]) >= 0
    ]
    head = f"<div><b>unit {unit}</b></div>"
    return f'<div class="hs-top-unit">{head}<div class="hs-top-row">{histogram}{"".join(cards)}</div></div>'


def _card(top: TopExamples, unit: int, rank: int, inputs: Tensor | None,
          tokens: Sequence[Sequence[str]] | None, model: nn.Module | None) -> str:  # fmt: skip
    batch, row, cell = top.where(unit, rank)
    index = top.input_index(unit, rank)
    place = (
        f"input {index}" if top.label == "difference" else f"batch {batch} row {row}" + (f" at {cell}" if cell else "")
    )
    body = ""
    if inputs is not None and inputs.dim() == 4:
        patch = _field(model, top.site, inputs[index], unit, cell) if model is not None and len(cell) == 2 else None
        patch = _patch(inputs[index], cell, top.grid) if patch is None else patch
        body = image_tag(to_pil(patch), alt=place, width=72)
    elif tokens is not None:
        body = _tokens(tokens[index], cell[0] if cell else None)
    value = f"{float(top.values[unit, rank]):.4g}"
    return f'<div class="hs-top-card">{body}<div>{escape(value)}</div><div>{escape(place)}</div></div>'


def receptive_box(model: nn.Module, site: str, image: Tensor, unit: int, cell: tuple[int, int]) -> tuple[slice, slice]:
    """The rows and columns of ``image`` (C, H, W) that ``site``'s activation at (unit, cell) depends on:
    the bounding box of its gradient's support, one forward and backward pass of ``model``."""
    device = next(model.parameters(), torch.empty(0)).device
    x = image[None].detach().to(device, copy=True).requires_grad_(True)
    with torch.enable_grad(), capture(model, site, detach=False, clone=False) as cap:
        model(x)
        value = cap[site].calls[0].sole("output")[0, unit, cell[0], cell[1]]
    (grad,) = torch.autograd.grad(value, x)
    support = grad[0].abs().sum(dim=0) > 0  # (H, W)
    rows, cols = support.any(dim=1).nonzero().flatten(), support.any(dim=0).nonzero().flatten()
    if not len(rows):
        return slice(0, 0), slice(0, 0)
    return slice(int(rows.min()), int(rows.max()) + 1), slice(int(cols.min()), int(cols.max()) + 1)


def _field(model: nn.Module, site: str, image: Tensor, unit: int, cell: tuple[int, ...]) -> Tensor | None:
    """The input under the activation's receptive field (its gradient's support), min-max scaled."""
    rows, cols = receptive_box(model, site, image, unit, (cell[0], cell[1]))
    if rows.stop == rows.start:
        warnings.warn(f"hookscope.probes.views: {site!r} unit {unit} at {cell} has a zero gradient on its input, "
                      "so its patch is the scaled map cell instead of its receptive field", CaptureWarning,
                      stacklevel=2)  # fmt: skip
        return None
    return _scaled(image[:, rows, cols])


def _patch(image: Tensor, cell: tuple[int, ...], grid: tuple[int, ...]) -> Tensor:
    """The input under a map cell, three cells wide, min-max scaled: (C, h, w) -> (3, h, w) or (h, w)."""
    if len(cell) == 2 and len(grid) == 2:
        boxes = []
        for c, n, side in zip(cell, grid, image.shape[1:], strict=True):
            stride = side / n
            boxes.append((max(0, int((c - 1) * stride)), min(side, int((c + 2) * stride + 0.999))))
        image = image[:, boxes[0][0] : boxes[0][1], boxes[1][0] : boxes[1][1]]
    return _scaled(image)


def _scaled(image: Tensor) -> Tensor:
    """(C, h, w) min-max scaled to [0, 1]: (3, h, w) for colour, (h, w) otherwise."""
    image = image.detach().float()
    image = (image - image.min()) / (image.max() - image.min()).clamp_min(1e-12)
    return image if image.shape[0] == 3 else image[0]


def _tokens(words: Sequence[str], position: int | None) -> str:
    if position is None:
        return token_html(list(words)[: 2 * WINDOW], [0.0] * min(len(words), 2 * WINDOW))
    start = max(0, position - WINDOW)
    shown = list(words)[start : position + WINDOW + 1]
    return token_html(shown, [1.0 if start + i == position else 0.0 for i in range(len(shown))])


def _check(top: TopExamples, inputs: Tensor | None, tokens: Sequence[Sequence[str]] | None) -> None:
    n = top.peaks.shape[1]
    given = len(inputs) if inputs is not None else len(tokens) if tokens is not None else n
    if given != n:
        raise ShapeError(f"the top examples of {top.site!r} index {n} inputs in store order, got {given} "
                         "inputs or token lists; pass the loader's inputs in the order extract read them")  # fmt: skip
