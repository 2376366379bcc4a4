"""One rank's extraction loop (``hookscope.extract``): each batch run, then written or counted.

``ExtractJob.tensors`` keeps one capture open for the whole run, hands each batch's kept tensors to a
background ``ShardWriter`` (``hookscope.store.shard_writer``) and clears the capture, so memory stays
flat; ``ExtractJob.statistics`` keeps nothing but a ``RunningStats`` per (site, kind, key), updated in
the hook by ``StatsAccumulator`` and merged batch by batch (only whole batches count). A batch runs
under ``torch.no_grad()``, or with a target, its backward pass.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..base.world import World
from ..core.capture import capture
from ..core.kinds import Kind
from ..core.policy import Reducer
from ..core.records import Label
from ..core.select import Selector
from ..errors import StoreError
from ..stats.streaming import RunningStats, merge_tables
from .batches import Forward, Loss, backward, rows_of
from .format import SHARDS, STATS_PARTS
from .names import by_entry
from .save import entries
from .shard_writer import Pending, ShardWriter, StatsCheckpoint
from .throughput import Meter
from .token_layout import as_tokens, batch_inputs, join_rows, join_tokens


class ExtractJob:
    """One rank's extraction loop, in its two flavours: tensors to shards, or statistics."""

    def __init__(self, root: Path, model: nn.Module, select: Selector | None, kinds: tuple[Kind, ...],
                 reduce: Reducer | None, world: World, meter: Meter, forward: Forward,
                 flush_every: float | None, target: Loss | None, layout: str = "rows") -> None:  # fmt: skip
        self.root, self.model, self.select, self.kinds, self.reduce = root, model, select, kinds, reduce
        self.world, self.meter, self.forward, self.flush_every = world, meter, forward, flush_every
        self.target, self.layout = target, layout
        self.token = f"r{world.rank}-{secrets.token_hex(4)}"  # this rank, this run: file names never collide

    def tensors(self, batches: Iterator[tuple[int, Any]], limit: int, shard_size: int) -> None:
        folder = self.root / SHARDS
        limit = limit * 2 // 3 if self.layout == "tokens" else limit  # joining a shard copies it (token_layout)
        writer = ShardWriter(folder, self.token, rank=self.world.rank, limit=limit, shard_size=shard_size,
                             flush_every=self.flush_every,
                             join=join_tokens if self.layout == "tokens" else join_rows)  # fmt: skip
        try:
            with capture(self.model, self.select, kinds=self.kinds, device="cpu", reduce=self.reduce) as cap:
                for index, batch in batches:
                    self._run(batch)
                    pending = self._pending(cap, index, batch)
                    cap.clear()
                    writer.put(pending)
                    rows = pending.rows
                    self.meter.step(rows, writer.written)
        except StoreError as err:  # the writer's: the disk is full, the folder went away
            writer.close(raise_error=False)
            raise _kept(err, writer) from err
        except BaseException:
            writer.close(raise_error=False)  # the batches completed so far still reach the disk
            raise
        else:
            try:
                writer.close()
            except StoreError as err:
                raise _kept(err, writer) from err
        finally:
            self.meter.close(writer.written)

    def _pending(self, cap: Any, index: int, batch: Any) -> Pending:
        """Batch ``index``'s tensors, named ``site/kind/key/call/b{index}`` (token-major with layout="tokens")."""
        listed, held, table = entries(cap, index)
        named, tensors = by_entry(listed, held)
        inputs = batch_inputs(batch)
        if self.layout == "tokens":
            tensors, inputs = as_tokens(named, tensors, inputs)
        nbytes = sum(t.nbytes for t in [*tensors.values(), *inputs.values()])
        return Pending(index, rows_of(batch), named, tensors, nbytes, table, inputs)

    def statistics(self, batches: Iterator[tuple[int, Any]], channel_dim: int | None) -> None:
        accumulate = StatsAccumulator(self.reduce, channel_dim)
        table: dict[Label, RunningStats] = {}
        covered: list[dict[str, Any]] = []
        checkpoint = StatsCheckpoint(self.root / STATS_PARTS, self.token, self.world.rank, self.flush_every)
        try:
            with capture(self.model, self.select, kinds=self.kinds, reduce=accumulate) as cap:
                for index, batch in batches:
                    accumulate.table = {}
                    self._run(batch)
                    cap.clear()
                    table = merge_tables([table, accumulate.table])  # only whole batches count
                    covered.append({"index": index, "rows": rows_of(batch)})
                    checkpoint.offer(table, covered)
                    self.meter.step(rows_of(batch), 0)
        finally:
            checkpoint.close()
            self.meter.close(0)

    def _run(self, batch: Any) -> None:
        if self.target is None:
            with torch.no_grad():
                self.forward(self.model, batch)
            return
        with torch.inference_mode(False), torch.enable_grad():
            backward(self.model, self.target, self.forward(self.model, batch), batch)


class StatsAccumulator:
    """The ``reduce=`` of a statistics run: updates this batch's ``RunningStats`` and keeps nothing."""

    def __init__(self, reduce: Reducer | None, channel_dim: int | None) -> None:
        self.reduce, self.channel_dim = reduce, channel_dim
        self.table: dict[Label, RunningStats] = {}

    def __call__(self, site: str, kind: str, key: str, tensor: Tensor) -> None:
        kept = self.reduce(site, kind, key, tensor) if self.reduce is not None else tensor
        if kept is not None:
            label = (site, kind, key)
            if label not in self.table:
                self.table[label] = RunningStats(channel_dim=self.channel_dim)
            self.table[label].update(kept)


def _kept(err: StoreError, writer: ShardWriter) -> StoreError:
    """``err`` with what the store keeps, and how to continue it."""
    return StoreError(f"{err}; the store keeps the {len(writer.batches)} batches written before it: free space "
                      "(or fix the folder) and rerun with resume=True to continue")  # fmt: skip
