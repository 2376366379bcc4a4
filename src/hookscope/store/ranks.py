"""Which batches this process extracts: its rank's share under torchrun, minus those already done.

Batches are numbered as one process would see them: batch ``i`` is the ``i``-th batch the
loader yields. Under ``torchrun`` (``WORLD_SIZE`` > 1), rank ``r`` of ``W`` takes batches
``r, r + W, r + 2W, ...``, so the ranks' shards together hold exactly what a single process
would have written, batch for batch. How a rank gets its share without loading the others':

- a ``DataLoader`` over a map-style dataset: its batch sampler is listed once and a new
  ``DataLoader`` (same dataset, workers, collate function) loads only this rank's batches, the
  way ``DistributedSampler`` gives each rank its samples. A loader whose sampler already is a
  ``DistributedSampler`` is taken as this rank's share: its ``k``-th batch is batch ``k * W + r``
  (and the samples it repeats to even out the ranks are stored as they come).
  A shuffled loader needs a seeded ``generator`` here, or every rank (and every resumed run)
  would see another order.
- a list or tuple of batches: indexed directly.
- any other iterable (an ``IterableDataset``, a generator): every batch is produced and the
  other ranks' ones are skipped (a rank stride).

Batches already in the store (``resume=True``) are skipped the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

from ..base.world import World
from ..errors import OptionError


def share(loader: Iterable[Any], world: World, done: set[int]) -> tuple[Iterator[tuple[int, Any]], int | None]:
    """``(index, batch)`` of this rank's batches not in ``done``, and how many (None if unknown)."""
    if isinstance(loader, DataLoader) and not isinstance(loader.dataset, IterableDataset):
        return _from_sampler(loader, world, done)
    if isinstance(loader, Sequence) and not isinstance(loader, (str, bytes)):
        mine = [i for i in range(len(loader)) if i % world.size == world.rank and i not in done]
        return ((i, loader[i]) for i in mine), len(mine)
    total = len(loader) if hasattr(loader, "__len__") else None  # type: ignore[arg-type]
    count = None if total is None else sum(1 for i in range(total) if i % world.size == world.rank and i not in done)
    return _strided(loader, world, done), count


def _from_sampler(loader: DataLoader[Any], world: World, done: set[int]) -> tuple[Iterator[tuple[int, Any]], int]:
    sharded = isinstance(loader.sampler, DistributedSampler)
    if isinstance(loader.sampler, RandomSampler) and loader.sampler.generator is None and (world.size > 1 or done):
        raise OptionError(
            "a shuffled DataLoader gives every process (and every resumed run) another order; pass shuffle=False, "
            "or a sampler with a seeded generator (torch.Generator().manual_seed(0))"
        )
    batched = loader.batch_sampler is not None  # False for batch_size=None: every sample is a batch
    plan = list(loader.batch_sampler) if batched else [[i] for i in loader.sampler]  # type: ignore[arg-type]
    numbered = [(k * world.size + world.rank if sharded else k, indices) for k, indices in enumerate(plan)]
    mine = [(i, idx) for i, idx in numbered if (sharded or i % world.size == world.rank) and i not in done]
    picked: dict[str, Any] = (
        {"batch_sampler": [idx for _, idx in mine]}
        if batched
        else {"batch_size": None, "sampler": [idx[0] for _, idx in mine]}
    )
    subset = DataLoader(
        loader.dataset, num_workers=loader.num_workers, collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
        timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context, prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers, **picked,
    )  # fmt: skip
    return zip((i for i, _ in mine), subset, strict=True), len(mine)


def _strided(loader: Iterable[Any], world: World, done: set[int]) -> Iterator[tuple[int, Any]]:
    for i, batch in enumerate(loader):
        if i % world.size == world.rank and i not in done:
            yield i, batch
