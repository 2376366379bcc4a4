"""Where compared representations come from, batch by batch: a model run under a capture, or a store.

Each batch gives, per *unit*, an ``(n, n)`` matrix over its ``n`` inputs (a Gram matrix for CKA,
a dissimilarity matrix for RSA). A unit is one tensor of one call of one site: ``layer1`` for a
module called once that returns a tensor, ``block call 1`` for its second call, ``encoder out[0]``
for the first tensor of a tuple. From a model the matrix is made inside the hook
(``capture(reduce=...)``), from the value the module returned, before any later in-place op (a
``ReLU(inplace=True)``) can rewrite it: the same numbers as a clone, without keeping one. A store
holds what its hooks kept, which ``extract`` clones.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..core.capture import capture
from ..core.modes import evaluating
from ..core.records import Record
from ..core.select import Selector, select_modules
from ..errors import CaptureWarning, MismatchError, NotCapturedError
from ..store.batches import default_forward, model_device
from ..store.reader import Run, load, selected_sites

Matrix = Callable[[Tensor], Tensor]  # (n, ...) -> (n, n)
Matrices = dict[str, Tensor]  # unit -> (n, n)
MIN_ROWS = 4  # HSIC1 divides by n - 3


@dataclass(frozen=True)
class Pick:
    """Which tensors of a site are units: ``call`` (None: every call) and ``key`` (None: every floating tensor)."""

    call: int | None = None
    key: str | None = None


def unit_name(site: str, call: int, calls: int, key: str, keys: int) -> str:
    """``site``, then ``call k`` when it ran several times, then the key when it is not the only ``out``."""
    name = site if calls == 1 else f"{site} call {call}"
    return name if keys == 1 and key == "out" else f"{name} {key}"


def units_of(records: Mapping[str, Record], pick: Pick, matrix: Matrix | None = None) -> Matrices:
    """The matrix of each unit in ``records`` (made by ``matrix`` when the records hold raw values)."""
    found: Matrices = {}
    for site, record in records.items():
        calls = list(enumerate(record.calls))
        if pick.call is not None:
            if not -len(calls) <= pick.call < len(calls):
                raise NotCapturedError(f"call={pick.call} of {site!r}, which ran {len(calls)} times in a batch; "
                                       f"pass call= from 0 to {len(calls) - 1}, or None for every call")  # fmt: skip
            calls = [calls[pick.call]]
        for index, call in calls:
            keys = [k for k in call.keys("output") if pick.key in (None, k)]
            for key in keys:
                value = call.get("output", key)
                if matrix is not None and not value.is_floating_point():
                    continue
                found[unit_name(site, index, len(record.calls), key, len(keys))] = (
                    value if matrix is None else matrix(value)
                )
    return found


def same_rows(found: Matrices, where: str) -> Matrices:
    """The units whose matrices are ``n x n`` for the batch's ``n`` (the most common size); warns for the others."""
    if not found:
        return found
    n = Counter(m.shape[-1] for m in found.values()).most_common(1)[0][0]
    odd = [name for name, m in found.items() if m.shape[-1] != n]
    if odd:
        warnings.warn(
            f"hookscope.compare: {', '.join(odd[:4])} of {where} have no row per input ({n} rows in the batch); "
            "left out: pick units whose first dimension is the batch",
            CaptureWarning,
            stacklevel=5,
        )
    return {name: m for name, m in found.items() if m.shape[-1] == n}


def reducer(matrix: Matrix) -> Callable[[str, str, str, Tensor], Tensor | None]:
    """A ``capture(reduce=...)`` that keeps each floating output's matrix instead of the output."""

    def reduce(site: str, kind: str, key: str, tensor: Tensor) -> Tensor | None:
        return matrix(tensor) if tensor.is_floating_point() and tensor.dim() >= 1 else None

    return reduce


def model_batches(
    models: Sequence[nn.Module], selects: Sequence[Selector | None], loader: Any, matrix: Matrix, pick: Pick
) -> Generator[list[Matrices]]:
    """Per batch of ``loader``, the units of each model (one capture per distinct model, in eval mode)."""
    distinct = list({id(m): m for m in models}.values())
    names = {id(m): _union(m, [s for mm, s in zip(models, selects, strict=True) if mm is m]) for m in distinct}
    with ExitStack() as stack, torch.inference_mode():
        for model in distinct:
            stack.enter_context(evaluating(model, "hookscope.compare", wrappers=2))
        caps = {id(m): stack.enter_context(capture(m, names[id(m)], reduce=reducer(matrix))) for m in distinct}
        feeds = {id(m): default_forward(model_device(m)) for m in distinct}
        sides = [(caps[id(m)], [n for n, _ in select_modules(m, s)]) for m, s in zip(models, selects, strict=True)]
        for batch in loader:
            for model in distinct:
                feeds[id(model)](model, batch)
            yield [units_of({site: cap[site] for site in sites}, pick) for cap, sites in sides]
            for cap in caps.values():
                cap.clear()


def _union(model: nn.Module, selects: list[Selector | None]) -> list[str]:
    chosen = {name for select in selects for name, _ in select_modules(model, select)}
    return [name for name, _ in select_modules(model, None if None in selects else list(chosen))]


def store_batches(
    runs: Sequence[Run], selects: Sequence[Selector | None], matrix: Matrix, pick: Pick
) -> Generator[list[Matrices]]:
    """Per batch the stores share, the units of each store (their matrices made from the stored values)."""
    batches = [run.batches for run in runs]
    if any(b != batches[0] for b in batches):
        raise MismatchError(f"the stores hold other batches ({_span(batches[0])} and {_span(batches[-1])}); compare "
                          "stores extracted from the same loader, in the same order")  # fmt: skip
    sites = [selected_sites(run, select) for run, select in zip(runs, selects, strict=True)]
    for index in batches[0]:
        found = []
        for run, names in zip(runs, sites, strict=True):
            records = run.batch(index)
            found.append(units_of({site: records[site] for site in names}, pick, matrix))
        yield found


def open_store(source: Run | str | os.PathLike[str]) -> Run:
    return source if isinstance(source, Run) else load(source)


def _span(batches: list[int]) -> str:
    return f"{len(batches)} batches" + (f" {batches[0]}..{batches[-1]}" if batches else "")
