"""The inputs a unit fires on most, read from a store that ``extract(..., reduce=top_examples(k))`` wrote.

::

    hookscope.extract(model, loader, select="layer4", out="top.hookscope", reduce=reducers.top_examples(top_k=9))
    top = TopExamples.read(hookscope.load("top.hookscope"), "layer4")
    top.values[17], top.batches[17], top.rows[17], top.positions[17]   # unit 17's 9 best, descending
    top.where(17, 0)                    # (batch, row, (h, w)) of its best: a map cell, a token, ()
    top.peaks[17]                       # each input's largest value of unit 17: its histogram
    top.difference(other)               # checkpoint A vs B: per unit, the inputs whose peak moved most

Each batch holds its own top k per unit (``hookscope.reducers.top_examples``); the run's top k is
the top k of those, which is exact (an activation among the run's k largest is among its batch's k
largest), so a resumed store merges whatever batches it holds and nothing is kept between batches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..base.deprecation import renamed
from ..base.display import Shows
from ..base.words import closest, columns
from ..core.kinds import Kind
from ..errors import NotCapturedError, StoreError
from ..reducers import GRID
from ..store.reader import Run
from ..viz.charts import counts_plot

if TYPE_CHECKING:
    from PIL.Image import Image


@dataclass(frozen=True, eq=False)
class TopExamples(Shows):
    """Per unit of one site, its ``k`` largest activations over a run: value, batch, row and position.

    Attributes:
        site: the site's name.
        values: ``(U, k)`` float64, descending: each unit's k largest activations (NaN where the run
            had fewer).
        batches: ``(U, k)`` int64: each example's batch index in the store (-1: none).
        rows: ``(U, k)`` int64: its row within that batch.
        positions: ``(U, k)`` int64: its flat position in ``grid`` (0 for rows).
        grid: the positions' shape: ``(H, W)`` for maps, ``(T,)`` for tokens, ``()`` for rows.
        peaks: ``(U, N)`` float64: each input's largest value of the unit, in store order.
        order: ``(N, 2)`` int64: each input's (batch, row), in store order.
        inputs: ``(U, k)`` int64: each example's input, an index into ``peaks``' columns.
        label: what ``values`` are: ``activation``, or ``difference`` of two runs.
    """

    site: str
    values: Tensor  # (U, k) float64, descending; NaN where the run had fewer than k activations
    batches: Tensor  # (U, k) int64: the batch index in the store (-1: none)
    rows: Tensor  # (U, k) int64: the row within that batch
    positions: Tensor  # (U, k) int64: the flat position within the grid (map cell, token); 0 for rows
    grid: tuple[int, ...]  # the positions' shape: (H, W) for maps, (T,) for tokens, () for rows
    peaks: Tensor  # (U, N) float64: each input's largest value of the unit, in store order
    order: Tensor  # (N, 2) int64: each input's (batch, row), in store order
    inputs: Tensor  # (U, k) int64: the example's input in store order (an index into peaks' columns)
    label: str = "activation"  # what values are: an activation, or a difference of two runs

    @property
    def k(self) -> int:
        return int(self.values.shape[1])

    @property
    def units(self) -> int:
        return int(self.values.shape[0])

    def where(self, unit: int, rank: int = 0) -> tuple[int, int, tuple[int, ...]]:
        """(batch, row, position in the grid) of the unit's ``rank``-th largest activation.

        Args:
            unit: the unit (channel, feature).
            rank: 0 for its largest activation, 1 for the next, ...

        Returns:
            ``(batch, row, cell)``, where ``cell`` is the position's index in ``grid`` (``()`` for rows).
        """
        flat = int(self.positions[unit, rank])
        cell = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), self.grid)) if self.grid else ()
        return int(self.batches[unit, rank]), int(self.rows[unit, rank]), cell

    def input_index(self, unit: int, rank: int = 0) -> int:
        """The input of the unit's ``rank``-th example, counted in store order over every batch.

        Args:
            unit: the unit.
            rank: 0 for its largest activation, 1 for the next, ...

        Returns:
            The input's index in store order.
        """
        return int(self.inputs[unit, rank])

    def histogram(self, unit: int, bins: int = 24) -> tuple[list[int], list[float]]:
        """(counts, edges) of the unit's peak value per input (finite values), on ``bins`` equal bins.

        Args:
            unit: the unit.
            bins: how many equal bins.

        Returns:
            ``(counts, edges)`` with ``bins`` counts and ``bins + 1`` edges.
        """
        peaks = self.peaks[unit]
        finite = peaks[peaks.isfinite()]
        low, high = (float(finite.min()), float(finite.max())) if len(finite) else (0.0, 1.0)
        high = high if high > low else low + 1.0
        counts = finite.histc(bins, low, high).long().tolist()
        return counts, [low + (high - low) * i / bins for i in range(bins + 1)]

    def plot(self, unit: int | None = None) -> Image:
        """The histogram of a unit's peak per input (default: the unit with the largest best value).

        Args:
            unit: the unit drawn; None draws the one with the largest best value.

        Returns:
            A PIL image of the histogram.

        Raises:
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        chosen = self.ranked()[0] if unit is None else unit
        counts, edges = self.histogram(chosen)
        return counts_plot(counts, edges, title=f"{self.site} unit {chosen}: {self.label} peak per input")

    @classmethod
    def read(cls, run: Run, site: str, kind: Kind = "output") -> TopExamples:
        """The run's top k of ``site``, merged from every batch the store holds, in batch order.

        Args:
            run: a store extracted with ``reduce=hookscope.reducers.top_examples(k)``.
            site: the site's name.
            kind: the kind read (default ``output``).

        Returns:
            The ``TopExamples`` of ``site`` over every batch the store holds.

        Raises:
            StoreError: the store was not extracted with ``top_examples``, or holds no finished batch.
            NotCapturedError: the store holds no site ``site``.
        """
        k = _k_of(run)
        if site not in run:
            raise NotCapturedError(f"{run.path} holds no site {site!r}{closest(site, list(run))}")
        tables = [(b, run.batch(b)[site].calls[0].sole(kind).double()) for b in run.batches]
        if not tables:
            raise StoreError(f"{run.path} holds no finished batch; extract into it (or resume=True) first")
        return merged(site, k, tables)

    def difference(self, other: TopExamples) -> TopExamples:
        """Per unit, the ``k`` inputs whose peak moved most from ``other`` to this run (values: the signed change,
        ranked by its size).

        Args:
            other: the same site's ``TopExamples`` from another run over the same inputs.

        Returns:
            A ``TopExamples`` labelled ``difference``, per unit, the inputs whose peak changed most.

        Raises:
            StoreError: the two runs do not hold the same units and inputs.
        """
        if self.peaks.shape != other.peaks.shape:
            raise StoreError(f"two runs compare input by input: {self.site!r} has {tuple(self.peaks.shape)} "
                             f"(units, inputs) here and {tuple(other.peaks.shape)} there; extract both over the "
                             "same loader")  # fmt: skip
        grown = self.peaks - other.peaks  # (U, N)
        top = grown.abs().nan_to_num(nan=-torch.inf).topk(min(self.k, grown.shape[1]), dim=1)
        batches, rows = self.order[top.indices, 0], self.order[top.indices, 1]
        return TopExamples(self.site, grown.gather(1, top.indices), batches, rows, torch.zeros_like(rows), (),
                           grown, self.order, top.indices, label="difference")  # fmt: skip

    @renamed(top_k="units")
    def table(self, *, units: int = 16) -> str:
        """A row per unit (the ``units`` units with the largest best value): its best values and where.
        ``top_k=`` is its old name (deprecated): ``top_k`` counts predictions, these are units.

        Args:
            units: how many units are listed, those with the largest best value first.

        Returns:
            The table, as text.
        """
        header = ["unit", "best", f"mean of top {self.k}", "batch", "row", "position"]
        rows = [header]
        for unit in self.ranked()[:units]:
            batch, row, cell = self.where(unit)
            rows.append([str(unit), f"{float(self.values[unit, 0]):.4g}", f"{float(self.values[unit].nanmean()):.4g}",
                         str(batch), str(row), str(cell) if cell else "-"])  # fmt: skip
        return "\n".join(columns(rows, right=range(1, 5)))

    def ranked(self) -> list[int]:
        """Units by their best value, largest first (a difference: by the size of its largest change).

        Returns:
            Unit indices, best first.
        """
        best = self.values[:, 0].abs() if self.label == "difference" else self.values[:, 0]
        return [int(u) for u in best.nan_to_num(nan=-torch.inf).argsort(descending=True, stable=True)]

    def __repr__(self) -> str:
        return f"<TopExamples of {self.site!r}: {self.units} units, top {self.k} of {self.peaks.shape[1]} inputs>"


def merged(site: str, k: int, tables: list[tuple[int, Tensor]]) -> TopExamples:
    """The top ``k`` per unit over several batches' ``top_examples`` tables ((U, 3k + 4 + B) each)."""
    values = torch.cat([t[:, :k] for _, t in tables], dim=1)  # (U, k * batches)
    batch = torch.cat([torch.full((t.shape[0], k), b, dtype=torch.int64) for b, t in tables], dim=1)
    rows = torch.cat([t[:, k : 2 * k] for _, t in tables], dim=1).long()
    positions = torch.cat([t[:, 2 * k : 3 * k] for _, t in tables], dim=1).long()
    top = values.nan_to_num(nan=-torch.inf).topk(k, dim=1)  # NaN (a batch short of k) sorts last
    found = ~values.gather(1, top.indices).isnan()
    first = tables[0][1][0, 3 * k : 3 * k + GRID]
    grid = tuple(int(s) for s in first[1 : 1 + int(first[0])])
    peaks = torch.cat([t[:, 3 * k + GRID :] for _, t in tables], dim=1)
    sizes = [t.shape[1] - 3 * k - GRID for _, t in tables]
    order = torch.cat([torch.stack([torch.full((n,), b), torch.arange(n)], dim=1) for (b, _), n in zip(tables, sizes,
                       strict=True)])  # fmt: skip
    starts = torch.tensor([0, *sizes]).cumsum(0)[:-1]  # each batch's first input, in store order
    index = starts[torch.cat([torch.full((t.shape[0], k), i) for i, (_, t) in enumerate(tables)], dim=1)] + rows

    def pick(part: Tensor) -> Tensor:
        return torch.where(found, part.gather(1, top.indices), torch.full_like(top.indices, -1))

    return TopExamples(site, values.gather(1, top.indices), pick(batch), pick(rows), pick(positions), grid, peaks,
                       order, pick(index))  # fmt: skip


def _k_of(run: Run) -> int:
    """The ``k`` of the ``top_examples(k)`` the store was extracted with (its manifest's ``reduce``)."""
    found = re.fullmatch(r"top_examples\((\d+)\)", str(run.config.get("reduce")))
    if found is None:
        used = run.config.get("reduce")
        raise StoreError(f"{run.path} was not extracted with reduce=top_examples(k) (its reduce is {used!r}); "
                         "extract it with reduce=hookscope.reducers.top_examples(top_k=9)")  # fmt: skip
    return int(found.group(1))
