"""``cka``: how alike two sets of representations are, layers x layers, streamed over a dataset.

::

    sim = hookscope.compare.cka(model_a, model_b, loader, select=":blocks")   # two models (or checkpoints)
    sim = hookscope.compare.cka(model, None, loader, select="layer*")        # one model, its layers x layers
    sim = hookscope.compare.cka("a.hookscope", "b.hookscope", select="layer*")  # two stores of the same inputs
    sim.table(); sim.plot(); sim["layer1", "layer2"]; sim.diagonal()

Linear CKA with the unbiased minibatch estimator (``hookscope.compare.hsic``), or with
``measure="rsa"`` the Spearman correlation of the dissimilarity matrices (``hookscope.compare.rdm``).
Nothing is kept between batches but the float64 sums, so a loader of any size fits.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..base.display import Shows, plot_of, table_of
from ..base.words import closest
from ..core.select import Selector
from ..errors import CaptureWarning, InputError, NotCapturedError, OptionError
from ..progress import Progress, callback
from ..store.reader import Run
from . import hsic, rdm
from .sources import MIN_ROWS, Matrices, Matrix, Pick, model_batches, open_store, same_rows, store_batches

if TYPE_CHECKING:
    from PIL.Image import Image

Source = nn.Module | Run | str | os.PathLike[str]
MEASURES = {"cka": hsic.gram, "rsa": rdm.rdm}


@dataclass(frozen=True)
class Similarity(Shows):
    """``values[i, j]``: the similarity of unit ``rows[i]`` of A with unit ``columns[j]`` of B (float64).

    Attributes:
        values: ``(len(rows), len(columns))`` float64.
        rows: A's units, in forward order.
        columns: B's units.
        measure: ``cka`` or ``rsa``.
        batches: the batches summed.
        samples: the inputs in them.
    """

    values: Tensor  # (len(rows), len(columns)) float64
    rows: tuple[str, ...]  # A's units, in forward order
    columns: tuple[str, ...]  # B's units
    measure: str  # "cka" or "rsa"
    batches: int  # the batches it summed
    samples: int  # the inputs in them

    def __repr__(self) -> str:
        shape = f"{len(self.rows)} x {len(self.columns)}"
        return f"<Similarity ({self.measure}) {shape} units over {self.samples} inputs in {self.batches} batches>"

    def __getitem__(self, pair: tuple[str, str]) -> float:
        """``sim["layer1", "layer2"]``: the value for unit ``layer1`` of A and ``layer2`` of B."""
        a, b = pair
        return float(self.values[_index(self.rows, a, "A"), _index(self.columns, b, "B")])

    def diagonal(self) -> dict[str, float]:
        """The value of each unit of A with the unit of B of the same name (the units both have).

        Returns:
            Unit name -> its value.
        """
        return {name: self[name, name] for name in self.rows if name in self.columns}

    def table(self) -> str:
        """The matrix as text: A's units down, B's across (numbered), values to 3 decimals.

        Returns:
            The table, as text.
        """
        return table_of(self)

    def plot(self, *, cmap: str = "magma") -> Image:
        """A heatmap, A's units down and B's across; beside it the diagonal (same-named units) when there is one.

        Args:
            cmap: the matplotlib colormap.

        Returns:
            A PIL image of the heatmap.

        Raises:
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        return plot_of(self, cmap=cmap)


def _index(names: tuple[str, ...], name: str, side: str) -> int:
    if name not in names:
        raise NotCapturedError(f"{name!r} is not a unit of {side} ({len(names)} units{closest(name, names)}); "
                               f"list them with sim.{'rows' if side == 'A' else 'columns'}")  # fmt: skip
    return names.index(name)


def cka(
    model_a: Source,
    model_b: Source | None = None,
    loader: Iterable[Any] | None = None,
    *,
    select: Selector | None = None,
    select_b: Selector | None = None,
    measure: str = "cka",
    call: int | None = None,
    key: str | None = None,
    progress: Progress = None,
) -> Similarity:
    """The similarity of every unit ``select`` picks in A with every unit ``select_b`` picks in B.

    ``model_a``, ``model_b``: two models (or checkpoints) run on each batch of ``loader``, or two stores
    (paths or ``hookscope.load`` runs) of the same inputs, with no loader. ``model_b=None``: A again
    (layers x layers of one model, run once). ``select``: A's modules (None: every leaf module; a
    store's sites by name or glob); ``select_b``: B's (None: the same as ``select``). A unit is one
    floating tensor of one call (``call=``: only that call, None every call) at one key (``key=``: only
    that key, None every key) of a selected module's output. ``measure``: ``"cka"`` (linear, unbiased
    minibatch HSIC, Nguyen et al. 2021) or ``"rsa"`` (Spearman correlation of the 1 - Pearson
    dissimilarity matrices, averaged over batches). Batches need at least 4 inputs; a smaller one is
    left out with a warning. ``progress`` hears ``("cka" or "rsa", batches done, 0)`` after each batch.

    Args:
        model_a: a model (or checkpoint), or a store (a path or a ``Run``).
        model_b: the other model or store; None compares A with itself.
        loader: the batches both models run on; None for stores.
        select: A's modules (or a store's sites by name or glob); None takes every leaf module.
        select_b: B's; None takes the same as ``select``.
        measure: ``cka`` (linear, unbiased minibatch HSIC) or ``rsa``.
        call: only this call of each module; None takes every call.
        key: only this key of each output; None takes every key.
        progress: None or False (quiet), True (lines on stderr), a stream, or a callable
            ``(stage, done, total)`` (``hookscope.progress``).

    Returns:
        A ``Similarity``, A's units down, B's across.

    Raises:
        OptionError: an unknown ``measure``, or stores that hold other batches.
        InputError: models without a loader, or stores with one.
        NotCapturedError: a batch lacks a unit batch 0 had, or gave no floating tensor.
        SelectionError: ``select`` matches no module.
    """
    matrix = MEASURES.get(measure)
    if matrix is None:
        raise OptionError(f"measure={measure!r} is not a similarity measure; pass 'cka' or 'rsa'")
    batches = _batches(model_a, model_b, loader, (select, select_b), matrix, Pick(call, key))
    return _accumulate(batches, measure, callback(progress))


def _batches(
    a: Source, b: Source | None, loader: Iterable[Any] | None, selects: tuple[Selector | None, Selector | None],
    matrix: Matrix, pick: Pick,
) -> Generator[list[Matrices]]:  # fmt: skip
    select, select_b = selects[0], selects[0] if selects[1] is None else selects[1]
    if isinstance(a, nn.Module):
        if loader is None or (b is not None and not isinstance(b, nn.Module)):
            raise InputError(f"comparing models needs two models (or None) and a loader, got {_what(b)} and "
                             f"loader={_what(loader)}; pass cka(model_a, model_b, loader)")  # fmt: skip
        return model_batches([a, a if b is None else b], [select, select_b], loader, matrix, pick)
    if loader is not None or isinstance(b, nn.Module):
        raise InputError(f"comparing stores needs two stores (or None) and no loader, got {_what(a)}, {_what(b)} and "
                         f"loader={_what(loader)}; pass cka('a.hookscope', 'b.hookscope')")  # fmt: skip
    run_a = open_store(a)
    return store_batches([run_a, run_a if b is None else open_store(b)], [select, select_b], matrix, pick)


def _what(obj: object) -> str:
    return "None" if obj is None else type(obj).__name__


class _Sums:
    """The float64 sums over batches: HSIC1 terms (cka) or Spearman correlations (rsa)."""

    def __init__(self, measure: str) -> None:
        self.measure = measure
        self.rows: tuple[str, ...] = ()
        self.columns: tuple[str, ...] = ()
        self.terms: list[Tensor] = []
        self.batches = self.samples = 0

    def add(self, units_a: Matrices, units_b: Matrices) -> None:
        if not self.batches:
            self.rows, self.columns = tuple(units_a), tuple(units_b)
        _check_units(self.rows, units_a, "A", self.batches)
        _check_units(self.columns, units_b, "B", self.batches)
        grams_a = torch.stack([units_a[u] for u in self.rows])  # (A, n, n)
        grams_b = torch.stack([units_b[u] for u in self.columns])  # (B, n, n)
        if self.measure == "cka":
            terms = list(hsic.hsic_terms(grams_a, grams_b))
        else:
            terms = [rdm.spearman(rdm.upper(grams_a), rdm.upper(grams_b))]
        self.terms = terms if not self.terms else [s + t for s, t in zip(self.terms, terms, strict=True)]
        self.batches += 1
        self.samples += grams_a.shape[-1]

    def result(self) -> Similarity:
        if not self.batches:
            raise InputError(
                f"no batch of at least {MIN_ROWS} inputs to compare; pass a loader with batches of 4 or more"
            )
        values = hsic.cka_of(*self.terms) if self.measure == "cka" else self.terms[0] / self.batches
        return Similarity(values.cpu(), self.rows, self.columns, self.measure, self.batches, self.samples)


def _check_units(expected: tuple[str, ...], found: Matrices, side: str, batch: int) -> None:
    missing = [u for u in expected if u not in found]
    if missing:
        raise NotCapturedError(f"batch {batch} has no {', '.join(missing[:4])} in {side}, which batch 0 had; "
                               "a unit must run in every batch (pick it with call= or key=)")  # fmt: skip


def _accumulate(batches: Generator[list[Matrices]], measure: str, step: Any) -> Similarity:
    with contextlib.closing(batches):  # an error half-way removes the hooks now, not when collected
        return _summed(batches, measure, step)


def _summed(batches: Generator[list[Matrices]], measure: str, step: Any) -> Similarity:
    sums = _Sums(measure)
    for index, (units_a, units_b) in enumerate(batches):
        units_a, units_b = same_rows(units_a, "A"), same_rows(units_b, "B")
        n = next(iter(units_a.values())).shape[-1] if units_a else 0
        if not units_a or not units_b:
            raise NotCapturedError(f"batch {index} gave no floating tensor to compare in {'A' if not units_a else 'B'};"
                                   " select modules that return tensors")  # fmt: skip
        if n < MIN_ROWS or n != next(iter(units_b.values())).shape[-1]:
            warnings.warn(f"hookscope.compare: batch {index} has {n} inputs; {measure} needs at least {MIN_ROWS} "
                          "and the same in A and B: left out", CaptureWarning, stacklevel=3)  # fmt: skip
            continue
        sums.add(units_a, units_b)
        step(measure, sums.batches, 0)
    return sums.result()
