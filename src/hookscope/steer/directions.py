"""``directions``: a direction per site from a store's rows, labelled two ways (or paired), streamed in float64.

::

    found = hookscope.directions("acts.hookscope", labels, groups=pair_ids, method="pca")
    found["transformer.h.3"].vector       # for edits.add, or found.to_steering_vector()

``labels``: one per row of the store, in the order its batches ran, 1 (toward) or 0 (away).
``groups``: one id per row (numbers or text); rows sharing an id stay on one side of the
train/held-out split (``probes.fit.group_split``), and for ``method="pca"`` each id is a pair,
one row of each label. The methods:

``mean_difference``  the class means' difference (for pairs: the mean pair difference, the same)
``pca``              the first principal axis of the UNCENTRED pair differences ``a_i - b_i``;
                     centring them would subtract the concept itself (repeng's ``pca_diff`` does)
``logistic``         ``hookscope.probe``'s logistic fit (``probes.fit.fit_logistic``'s loss, solver
                     and start; ``penalty``), its weight of class 1 less class 0

Rows are read ``read_rows`` at a time, never more than ``max_memory`` of float64 rows at once (a
pair's rows are gathered in blocks, one pass over the store per block); sums, the ``D x D`` Gram
matrix and the ``logistic`` loss are built chunk by chunk (``hookscope.steer.contrast``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import Tensor

from .._version import __version__
from ..base.words import closest, parse_size
from ..core.kinds import Kind
from ..core.select import Selector
from ..errors import HookscopeWarning, NonFiniteError, OptionError, ShapeError
from ..probes.fit import SMALL, group_split, one_thread
from ..progress import Progress, callback
from ..store.columns import Column, columns
from ..store.format import MAX_MEMORY
from ..store.reader import Run, load
from . import contrast, direction_views  # noqa: F401  (direction_views registers the faces)
from .direction import Direction, Directions

METHODS = ("mean_difference", "pca", "logistic")
Labels = Tensor | Sequence[int] | Sequence[bool]


def directions(
    source: Run | str | os.PathLike[str],
    labels: Labels,
    *,
    groups: Tensor | Sequence[Any] | None = None,
    select: Selector | None = None,
    method: str = "mean_difference",
    kind: Kind = "output",
    key: str | None = None,
    holdout: float = 0.25,
    penalty: float = 1e-3,
    seed: int = 0,
    max_memory: int | str = MAX_MEMORY,
    progress: Progress = None,
) -> Directions:
    """A direction from the rows labelled 0 to those labelled 1 at every site ``select`` picks, and its held-out AUC.

    See the module docstring for the methods. Each row of a site is one example, flattened (extract
    with a ``reduce=`` that keeps one token per sequence for a token's direction). The held-out
    ``holdout`` share of the groups, drawn with ``seed``, is never fitted: its rows' projections on the
    direction give ``auc``. ``progress`` (``hookscope.progress``; default quiet) hears
    ``("directions", sites done, sites)``.

    Args:
        source: a store (a path, or a ``load``-ed ``Run``).
        labels: one per row, in the order the batches ran: 1 (toward) or 0 (away), integers or booleans.
        groups: one id per row, kept on one side of the split; for ``pca``, one id per pair. None makes each
            row its own group.
        select: the sites read; None reads every site of the store.
        method: ``mean_difference`` (the default), ``pca`` (pairs) or ``logistic``.
        kind: the kind read (default ``output``).
        key: the tensor of a call; None takes the site's first.
        holdout: the share of groups held out, in (0, 1).
        penalty: the L2 strength of ``logistic`` (as ``hookscope.probe``'s).
        seed: the seed of the split.
        max_memory: the most bytes of float64 rows held at once, in bytes or as text (``"1GB"``).
        progress: None or False (quiet), True (lines on stderr), a stream, or a callable
            ``(stage, done, total)``.

    Returns:
        ``Directions``: per site a ``Direction`` (unit vector, norm, held-out AUC), with the provenance.

    Raises:
        OptionError: ``source`` is not a store; labels other than 0 and 1 or of one value, an unknown method,
            ``pca`` groups that are not pairs, a split that leaves a label out of training, or classes whose
            rows do not differ.
        SelectionError: ``select`` matches no site.
        NotCapturedError: the store holds no such kind or key at a site.
        ShapeError: labels or groups do not give one entry per row.
        NonFiniteError: a site holds NaN or infinite activations.
    """
    if method not in METHODS:
        raise OptionError(f"directions' method is one of {', '.join(METHODS)}, got {method!r}"
                          f"{closest(method, METHODS)}")  # fmt: skip
    run = load(source) if isinstance(source, (str, os.PathLike)) else source
    if not isinstance(run, Run):
        raise OptionError(f"directions read a store (a path, or hookscope.load's Run), got a {type(source).__name__}; "
                          "write a capture first with hookscope.save(cap, out)")  # fmt: skip
    y, ids = _labels(labels), _ids(groups, len(as_rows(labels)))
    split = group_split(ids, holdout=holdout, seed=seed)
    pairs = _pairs(y, ids, split[0]) if method == "pca" else None
    found, limit = columns(run, select, kind, key, "rows", True), parse_size(max_memory)
    step, done = partial(callback(progress), "directions"), {}
    step(0, len(found))
    for column in found:
        _check_rows(column, len(y))
        with one_thread(len(y) * math.prod(_shape(column)) < SMALL):  # small reads: threads cost more than they give
            fitted = _site(column, y, split, method, pairs, limit=limit, penalty=penalty)
        done[column.site] = replace(fitted, groups=len(torch.unique(ids)))
        if math.isnan(fitted.auc):
            warnings.warn(f"hookscope.directions: the held-out rows of {column.site!r} hold one label only, so its AUC "
                          "is NaN; pass groups= that mix the labels, or a larger holdout", HookscopeWarning,
                          stacklevel=2)  # fmt: skip
        step(len(done), len(found))
    provenance = {"store": str(run.path), "store_hash": _hash(run.manifest), "sites": list(done), "method": method,
                  "kind": kind, "key": key, "rows": len(y), "labelled_1": int(y.sum()),
                  "labelled_0": int(len(y) - y.sum()), "pairs": pairs is not None, "holdout": holdout, "seed": seed,
                  "penalty": penalty, "max_memory": limit, "model_type": run.provenance.get("model_type"),
                  "hookscope": __version__}  # fmt: skip
    return Directions(done, provenance)


def _site(column: Column, y: Tensor, split: tuple[Tensor, Tensor], method: str, pairs: tuple[Tensor, Tensor] | None,
          *, limit: int, penalty: float) -> Direction:  # fmt: skip
    """One site's direction: sums over the training rows, the method's fit, the held-out projections' AUC."""
    train, test = split
    shape = _shape(column)
    features = math.prod(shape)
    per_read = max(1, limit // (2 * 8 * features))  # a chunk read, and as much again for a block of pairs
    sums = contrast.Sums(features)
    for x, labels in _chunks(column, y, train, per_read):
        sums.add(x, labels)
    if bool((sums.counts == 0).any()):
        raise OptionError(f"the training rows of {column.site!r} hold no row labelled {int(sums.counts.argmin())}: "
                          "every group of that label was held out; pass more groups, or another seed")  # fmt: skip
    toward = sums.mean_difference()
    if method == "pca" and pairs is not None:
        raw = contrast.top_direction(contrast.gram(_differences(column, *pairs, per_read), features), toward)
    elif method == "logistic":
        fit = partial(_chunks, column, y, train, per_read)
        raw = contrast.fit_logistic(fit, sums.mean, sums.scale(), rows=int(train.sum()), penalty=penalty)
    else:
        raw = toward
    if not float(raw.norm()) > 0:
        raise OptionError(f"the rows labelled 1 and 0 at {column.site!r} do not differ: no direction to find")
    unit = raw / raw.norm()
    scores = [(x @ unit, labels) for x, labels in _chunks(column, y, test, per_read)]
    held = contrast.auc(torch.cat([s for s, _ in scores]), torch.cat([lab for _, lab in scores]))
    return Direction(column.site, method, unit.reshape(shape), float(toward @ unit), held,
                     (int(train.sum()), int(test.sum())))  # fmt: skip


def read_rows(column: Column, batch: int, first: int, count: int) -> Tensor:
    """Rows ``first`` to ``first + count`` of a stored batch of ``column``, flattened, as float64: the one
    place rows are read, so at most ``count`` rows are copied at once.

    Args:
        column: the site's column of the store (``store.columns``).
        batch: the stored batch.
        first: its first row read.
        count: the rows read.

    Returns:
        ``(count, D)`` float64.

    Raises:
        NonFiniteError: they hold NaN or infinite values.
    """
    x = column.items(batch)[first : first + count].reshape(count, -1).double()
    bad = int((~x.isfinite()).sum())
    if bad:
        raise NonFiniteError(f"directions need finite activations; {column.site!r} holds {bad:,} NaN or infinite "
                             f"values in batch {batch}; find where with hookscope.nan_guard, or select other sites",
                             module=column.site, count=bad, numel=x.numel())  # fmt: skip
    return x


def _chunks(column: Column, y: Tensor, keep: Tensor, per_read: int) -> Iterator[tuple[Tensor, Tensor]]:
    """(x (n, D) float64, labels (n,)) of the rows ``keep`` marks, ``per_read`` rows read at a time, in order."""
    start = 0
    for batch in sorted(column.places):
        count = column.places[batch][2]
        for first in range(0, count, per_read):
            n = min(per_read, count - first)
            kept = keep[start + first : start + first + n]
            if bool(kept.any()):
                yield read_rows(column, batch, first, n)[kept], y[start + first : start + first + n][kept]
        start += count


def _differences(column: Column, toward: Tensor, away: Tensor, per_read: int) -> Iterator[Tensor]:
    """(pairs, D) blocks of ``row[toward[i]] - row[away[i]]``: each block of ``per_read // 2`` pairs gathered by one
    pass over the store, so at most ``per_read`` rows are held besides the chunk read."""
    rows, block = sum(place[2] for place in column.places.values()), max(1, per_read // 2)
    for first in range(0, len(toward), block):
        wanted = torch.cat([toward[first : first + block], away[first : first + block]])
        slot = torch.full((rows,), -1, dtype=torch.long)
        slot[wanted] = torch.arange(len(wanted))
        held: Tensor | None = None
        for x, row in _chunks(column, torch.arange(rows), slot >= 0, per_read):
            held = x.new_zeros(len(wanted), x.shape[1]) if held is None else held
            held[slot[row]] = x
        if held is not None:
            yield held[: len(wanted) // 2] - held[len(wanted) // 2 :]


def _shape(column: Column) -> tuple[int, ...]:
    """The shape of one row of the site (a view of its first batch: nothing is read)."""
    return tuple(column.items(min(column.places)).shape[1:]) or (1,)


def _check_rows(column: Column, rows: int) -> None:
    """One label per row, and one shape per row in every batch."""
    shapes = {tuple(where[3][1:]) for where, _, _ in column.places.values()}
    if len(shapes) > 1:
        raise ShapeError(f"directions need one shape per row at {column.site!r}, got {sorted(shapes)} in "
                         f"{column.run.path}; pad sequences to one length, or extract one token per row")  # fmt: skip
    held = sum(place[2] for place in column.places.values())
    if held != rows:
        raise ShapeError(f"directions' labels have {rows} entries, but {column.site!r} holds {held} rows in "
                         f"{column.run.path}; pass one label per row, in the order the batches ran")  # fmt: skip


def as_rows(values: Any) -> Tensor:
    """Labels or numeric ids as a flat CPU tensor."""
    return (values.detach().cpu() if isinstance(values, Tensor) else torch.as_tensor(values)).reshape(-1)


def _labels(labels: Labels) -> Tensor:
    y = as_rows(labels)
    values = set(torch.unique(y).tolist()) if y.numel() else set()
    if y.is_floating_point() or y.is_complex() or not values or not values <= {0, 1} or len(values) < 2:
        raise OptionError(f"directions' labels are 1 (toward) and 0 (away), both present, as integers or booleans; "
                          f"got {y.dtype} values {sorted(values)[:5]}")  # fmt: skip
    return y.long()


def _ids(groups: Tensor | Sequence[Any] | None, rows: int) -> Tensor:
    """One integer id per row: the groups given (numbers, or any hashable values such as text), or each row's own."""
    if groups is None:
        return torch.arange(rows)
    if isinstance(groups, Tensor):
        ids = as_rows(groups)
    else:
        seen: dict[Any, int] = {}
        ids = torch.tensor([seen.setdefault(g, len(seen)) for g in groups], dtype=torch.long)
    if len(ids) != rows:
        raise ShapeError(f"directions' groups have {len(ids)} entries for {rows} labels; pass one id per row")
    return ids


def _pairs(y: Tensor, ids: Tensor, train: Tensor) -> tuple[Tensor, Tensor]:
    """(toward, away): the rows labelled 1 and 0 of every training pair, by pair."""
    _, pair = torch.unique(ids, return_inverse=True)
    ones = torch.bincount(pair[y == 1], minlength=int(pair.max()) + 1)
    zeros = torch.bincount(pair[y == 0], minlength=int(pair.max()) + 1)
    unpaired = int(((ones != 1) | (zeros != 1)).sum())
    if unpaired:
        raise OptionError(f"method='pca' reads pairs: groups= gives each pair one id, with one row labelled 1 and one "
                          f"labelled 0; {unpaired} ids are not such pairs")  # fmt: skip
    rows = torch.arange(len(y))
    toward, away = torch.empty_like(ones), torch.empty_like(ones)
    toward[pair[y == 1]], away[pair[y == 0]] = rows[y == 1], rows[y == 0]
    kept = train[toward]
    return toward[kept], away[kept]


def _hash(manifest: dict[str, Any]) -> str:
    """The sha256 of the store's manifest (its index, config and provenance): which store, and which state of it."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, default=str).encode()).hexdigest()
