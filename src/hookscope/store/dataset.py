"""Stores as ``torch.utils.data`` datasets: ``StoreDataset`` (exact random access), ``StoreStream`` (a shuffle buffer).

::

    data = hookscope.StoreDataset("acts.hookscope", "blocks.3", by="tokens")   # (B, T, D) -> tokens of D
    loader = DataLoader(data, batch_size=4096, shuffle=True, num_workers=2)
    stream = hookscope.StoreStream("acts.hookscope", "blocks.3", by="tokens", minibatch=4096, seed=0)
    for epoch in range(2):
        stream.set_epoch(epoch)
        for x in DataLoader(stream, batch_size=None, num_workers=2): ...

Over one site an item is a tensor; over several sites or stores (two models on the same
batches: model diffing, crosscoders) a tuple, one tensor per (store, site), the stores aligned by
batch (``hookscope.store.columns``). ``by="rows"`` gives a row of each batch; ``by="tokens"`` a token:
``(B, T, D)`` flattened, padding left out where the store kept the batch's ``attention_mask``.
Tensors are views of memory-mapped shards: nothing is copied, and with ``verify=True`` (the default)
each array is read once when the dataset is made, through its CRC-32, so a damaged shard's batches are
left out (one ``StoreWarning``) before the length is given, and a ``DataLoader`` never meets them.

``StoreDataset[i]`` is item ``i``; ``StoreDataset[indices]`` (a list or tensor) gathers a minibatch
at once, one read per array (so ``DataLoader(data, batch_size=None, sampler=BatchSampler(...))``
is the fast path). ``StoreStream`` reads whole batches in a seeded order (``seed``, ``set_epoch``),
each rank and ``DataLoader`` worker its own share of them (ranks from ``torch.distributed`` or
torchrun's ``RANK`` / ``WORLD_SIZE``), through a shuffle buffer of at most ``max_memory`` bytes: when
full, it is shuffled and half of it yielded.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from ..base.deprecation import renamed
from ..base.words import parse_size
from ..base.world import World
from ..core.select import Selector
from ..errors import OptionError
from .addresses import Addresses
from .columns import Column, Source, align, columns
from .format import MAX_MEMORY

Item = Tensor | tuple[Tensor, ...]


class StoreDataset(Dataset[Item]):
    """Every row (``by="rows"``) or token (``by="tokens"``) of the sites ``select`` picks, by index.

    ``source``: a store's path, a ``load``-ed ``Run``, or a list of them (aligned by batch).
    ``select``: the sites, as ``core.store_sites.select_sites`` picks them (names, globs, ``re:``, module
    types, a list; None: every site). ``kind``, ``key``: which tensor of a call (``key=None``: the
    site's first). ``verify``: read each array through its CRC-32 once, here, so
    that the length is final before the first epoch: the batches of a damaged shard (its header, its
    rows or its bytes) are left out with one ``StoreWarning`` naming them, never found mid-epoch.

    Args:
        source: a store's path, a ``load``-ed ``Run``, or a list of them (aligned by batch).
        select: site names or glob patterns; None takes every site.
        kind: the kind read (default ``output``).
        key: the tensor of a call; None takes the site's first.
        by: ``rows`` (an item per sample) or ``tokens`` (an item per token of ``(B, T, D)`` values).
        verify: read every array through its CRC-32 here, leaving out a damaged shard's batches with a
            ``StoreWarning``; False trusts the bytes.

    Raises:
        OptionError: an unknown ``by``, or ``by="rows"`` on a token-major store.
        SelectionError: ``select`` matches no site of the store.
        StoreError: the store holds no ``kind`` at ``key`` of a selected site.
    """

    def __init__(
        self,
        source: Source | Sequence[Source],
        select: Selector | None = None,
        *,
        kind: str = "output",
        key: str | None = None,
        by: str = "rows",
        verify: bool = True,
    ) -> None:
        self.columns: list[Column] = columns(source, select, kind, key, by, verify)
        self.batches, self.starts = align(self.columns)
        self.addresses = [Addresses(column, self.batches) for column in self.columns]

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, index: int | Sequence[int] | Tensor) -> Item:
        asked = torch.as_tensor(index, dtype=torch.long)
        if asked.dim() == 0:  # one item (an int, a numpy or 0-d tensor index)
            return _one(self.gather(asked.reshape(1)), squeeze=True)
        return _one(self.gather(asked), squeeze=False)

    def gather(self, index: Tensor) -> list[Tensor]:
        """Items ``index`` (a 1-D long tensor) of every column: one gather each, its files joined (``addresses``).

        Args:
            index: a 1-D long tensor of item indices (negative ones count from the end).

        Returns:
            One tensor per column (site), each ``(len(index), *item_shape)``.

        Raises:
            OptionError: ``index`` is not 1-D.
            IndexError: an index is out of range.
        """
        if index.dim() != 1:
            raise OptionError(
                f"a StoreDataset is indexed by an int or a 1-D list of ints, got shape {tuple(index.shape)}"
            )
        index = torch.where(index < 0, index + len(self), index)
        if len(index) and (int(index.min()) < 0 or int(index.max()) >= len(self)):
            raise IndexError(f"index out of range for a StoreDataset of {len(self)} items")
        slot = torch.searchsorted(self.starts, index, right=True) - 1  # the batch (position in self.batches)
        offset = index - self.starts[slot]
        return [source.gather(source.items(slot, offset, index)) for source in self.addresses]


class StoreStream(IterableDataset[Item]):
    """The items of ``StoreDataset`` through a shuffle buffer: whole batches read in a seeded order, shuffled
    in a buffer of at most ``max_memory`` bytes; ``minibatch``: yield minibatches of that many items
    (``batch_size=``, its old name, is the rows a function sends through a model at once).

    Args:
        source: a store's path, a ``load``-ed ``Run``, or a list of them (aligned by batch).
        select: site names or glob patterns; None takes every site.
        kind: the kind read (default ``output``).
        key: the tensor of a call; None takes the site's first.
        by: ``rows`` (an item per sample) or ``tokens`` (an item per token).
        minibatch: yield minibatches of this many items; None yields single items.
        max_memory: the shuffle buffer's bound, in bytes or as text; default ``store.format.MAX_MEMORY``
            (1GB, as ``extract``'s).
        seed: the seed of the batch order and the shuffle (with ``set_epoch``'s epoch).
        verify: check each array's CRC-32 when it is first mapped.

    Raises:
        OptionError: ``minibatch`` is not a positive int or None, or an unknown ``by``.
        SelectionError: ``select`` matches no site of the store.
    """

    @renamed(batch_size="minibatch")
    def __init__(self, source: Source | Sequence[Source], select: Selector | None = None, *,
                 kind: str = "output", key: str | None = None, by: str = "rows", minibatch: int | None = None,
                 max_memory: int | str = MAX_MEMORY, seed: int = 0, verify: bool = True) -> None:  # fmt: skip
        self.data = StoreDataset(source, select, kind=kind, key=key, by=by, verify=verify)
        if minibatch is not None and (isinstance(minibatch, bool) or not isinstance(minibatch, int) or minibatch < 1):
            raise OptionError(f"minibatch must be a positive int or None (single items), got {minibatch!r}")
        self.minibatch, self.limit, self.seed, self.epoch = minibatch, parse_size(max_memory), seed, 0
        world = World.current(environment=True)
        self.rank, self.world = world.rank, world.size

    def set_epoch(self, epoch: int) -> None:
        """Shuffle for ``epoch`` (call it before each epoch, as with ``DistributedSampler``).

        Args:
            epoch: the epoch number; each gives another seeded order.
        """
        self.epoch = epoch

    def __iter__(self) -> Iterator[Item]:
        worker = get_worker_info()
        slot, slots = self.rank, self.world
        if worker is not None:
            slot, slots = self.rank * worker.num_workers + worker.id, self.world * worker.num_workers
        order = torch.randperm(len(self.data.batches), generator=_generator(self.seed, self.epoch))
        shuffle = _generator(self.seed, self.epoch, slot + 1)
        window = _Window(self.data.addresses, self.limit, shuffle, self.minibatch or 1)
        for position in order[slot::slots].tolist():
            window.add(position)
            if window.full():
                yield from self._emit(window, window.draw(half=True))
        yield from self._emit(window, window.draw(half=False))

    def _emit(self, window: _Window, drawn: list[Tensor]) -> Iterator[Item]:
        """The drawn items, as minibatches of ``minibatch`` (the last one shorter) or one by one."""
        size = self.minibatch or 1
        for start in range(0, len(drawn[0]), size):
            parts = window.gather([codes[start : start + size] for codes in drawn])
            yield _one(parts, squeeze=self.minibatch is None)


class _Window:
    """The shuffle buffer: the items of the batches read so far and not yet drawn, at most ``limit`` bytes
    of them, held as codes of their places in the mapped files (``store.addresses``: not copies); a drawn
    minibatch is gathered from those files straight into draw order."""

    def __init__(self, addresses: list[Addresses], limit: int, shuffle: torch.Generator, minibatch: int) -> None:
        self.addresses, self.generator, self.minibatch = addresses, shuffle, minibatch
        self.held: list[list[Tensor]] = [[] for _ in addresses]  # per column: the codes of the held items
        self.count, self.limit, self.per_item = 0, limit, sum(source.item_bytes for source in addresses)

    def add(self, slot: int) -> None:
        """Hold every item of the batch at ``slot`` (its place in ``StoreDataset.batches``)."""
        for held, source in zip(self.held, self.addresses, strict=True):
            held.append(source.codes(slot))
        self.count += len(self.held[0][-1])

    def full(self) -> bool:
        return self.count * max(self.per_item, 1) >= self.limit and self.count >= 2

    def draw(self, *, half: bool) -> list[Tensor]:
        """A random half of the held items (whole minibatches of them; all at the end), taken out: their codes."""
        if not self.count:
            return [torch.empty(0, dtype=torch.long) for _ in self.held]
        held = [torch.cat(codes) for codes in self.held]
        order = torch.randperm(self.count, generator=self.generator)
        taken = self.count // 2 if half else self.count
        taken -= taken % self.minibatch if half and taken >= self.minibatch else 0
        kept, drawn = order[taken:], order[:taken]
        self.held, self.count = [[torch.index_select(codes, 0, kept)] for codes in held], self.count - taken
        return [torch.index_select(codes, 0, drawn) for codes in held]  # (not codes[drawn]: 6x the time)

    def gather(self, codes: list[Tensor]) -> list[Tensor]:
        """The items ``codes`` name, of every column (one per column), in that order."""
        return [source.gather(c) for source, c in zip(self.addresses, codes, strict=True)]


def _one(parts: list[Tensor], *, squeeze: bool) -> Item:
    parts = [p[0] for p in parts] if squeeze else parts
    return parts[0] if len(parts) == 1 else tuple(parts)


def _generator(*seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(hash(seed) & 0x7FFF_FFFF_FFFF_FFFF)
