"""The background writers of ``extract``: batches in, shards out, memory bounded; statistics checkpoints.

The model's thread hands each finished batch (its kept tensors) to ``ShardWriter.put`` and
goes on with the next one; a writer thread gathers batches into shards of about
``shard_size`` bytes and writes each one (``hookscope.store.shards.write_shard``: temporary name,
fsync, rename). A shard holds whole batches only, so a batch is either in the store or not.

Durability: a shard is also written when its oldest batch has waited ``flush_every`` seconds,
full or not, so a batch handed over is on disk within ``flush_every`` seconds plus the time to
write it (and the shard before it), whatever the model's thread is doing, killed included.

Memory: ``pending`` counts the bytes handed over and not yet on disk. ``put`` waits while
``pending + batch > limit`` (unless nothing is pending: a batch larger than the limit still
goes through, alone), and asks the writer to flush what it gathered instead of waiting for a
full shard. Tensors held by hookscope therefore never exceed ``limit`` plus the batch being
computed. An error in the writer (a full disk) is raised by the next ``put`` or by ``close``.

``StatsCheckpoint`` is the same promise for a statistics run: the model's thread offers the
merged table after each batch, a thread writes the latest one every ``every`` seconds (each
checkpoint replaces the one before), and ``close`` writes the last.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

from ..core.records import Label
from ..stats.streaming import RunningStats
from .format import shard_name
from .shards import write_shard, write_stats
from .token_layout import join_rows

Join = Callable[[Sequence[Any]], tuple[dict[str, Tensor], dict[str, Any]]]


@dataclass(frozen=True)
class Pending:
    """One finished batch: its manifest entries and its distinct tensors, by name."""

    index: int
    rows: int | None
    entries: list[dict[str, Any]]
    tensors: dict[str, Tensor]
    nbytes: int
    layouts: dict[str, Any] = field(default_factory=dict)  # id -> layout JSON, the structures entries name
    inputs: dict[str, Tensor] = field(default_factory=dict)  # token ids, attention mask (token_layout)
    facts: dict[str, Any] = field(default_factory=dict)  # what else the manifest says of it (a vLLM request's)


class ShardWriter:
    """Writes ``Pending`` batches as shards ``folder/{prefix}-000000.safetensors``, ... in a thread.

    ``join(group) -> (tensors, metadata)`` lays a shard's batches out: as they are (``join_rows``), or
    token-major (``hookscope.store.token_layout.join_tokens``).
    """

    def __init__(
        self,
        folder: Path,
        prefix: str,
        *,
        rank: int,
        limit: int,
        shard_size: int,
        flush_every: float | None = None,
        join: Join = join_rows,
    ) -> None:
        self.folder, self.prefix, self.rank, self.join = folder, prefix, rank, join
        self.limit, self.shard_size = limit, min(shard_size, max(limit // 2, 1))
        self.flush_every = flush_every  # seconds a batch may wait for its shard to fill; None: no limit
        self.written = 0  # bytes of tensors on disk
        self.batches: list[int] = []  # batches on disk, in the order written
        self._cond = threading.Condition()
        self._queue: deque[tuple[float, Pending]] = deque()  # (when it was handed over, the batch)
        self._pending = 0
        self._flush = self._closed = False
        self._error: BaseException | None = None
        self._shards = 0
        self._thread = threading.Thread(target=self._run, name="hookscope-writer", daemon=True)
        self._thread.start()

    def put(self, batch: Pending) -> None:
        """Hand over a batch; waits while the bytes not yet on disk would pass the limit."""
        with self._cond:
            while self._error is None and self._pending and self._pending + batch.nbytes > self.limit:
                self._flush = True
                self._cond.notify_all()
                self._cond.wait()
            if self._error is not None:
                raise self._error
            self._queue.append((time.monotonic(), batch))
            self._pending += batch.nbytes
            self._cond.notify_all()

    def close(self, *, raise_error: bool = True) -> None:
        """Write what is left and stop the thread; raise the writer's error (if ``raise_error``)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        if raise_error and self._error is not None:
            raise self._error

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        group: list[Pending] = []
        oldest = 0.0  # when the first batch of ``group`` was handed over
        while True:
            with self._cond:
                while not (self._queue or self._closed or (group and (self._flush or self._due(oldest)))):
                    self._cond.wait(self._wait(oldest) if group else None)
                if self._queue:
                    arrived, batch = self._queue.popleft()
                    oldest = oldest if group else arrived
                    group.append(batch)
                flush = ((self._flush or self._closed) and not self._queue) or self._due(oldest)
                self._flush = False if flush else self._flush
                done = self._closed and not self._queue
            if group and (flush or sum(b.nbytes for b in group) >= self.shard_size):
                if not self._write(group):
                    return
                group = []
            if done:
                return

    def _due(self, oldest: float) -> bool:
        """Whether a group whose first batch came at ``oldest`` has waited ``flush_every`` seconds."""
        return self.flush_every is not None and time.monotonic() - oldest >= self.flush_every

    def _wait(self, oldest: float) -> float | None:
        """How long the thread may sleep before the group it holds is due (None: until woken)."""
        return None if self.flush_every is None else max(oldest + self.flush_every - time.monotonic(), 0.0)

    def _write(self, group: list[Pending]) -> bool:
        path = self.folder / shard_name(self.prefix, self._shards)
        try:
            tensors, laid_out = self.join(group)
            meta = {
                "rank": self.rank,
                "batches": [{"index": b.index, "rows": b.rows, **b.facts} for b in group],
                "layouts": {name: layout for b in group for name, layout in b.layouts.items()},
                **laid_out,
            }
            write_shard(path, tensors, meta)
        except BaseException as err:
            with self._cond:
                self._error = err
                self._pending = 0
                self._cond.notify_all()
            return False
        self._shards += 1
        with self._cond:
            self.written += sum(b.nbytes for b in group)
            self.batches.extend(b.index for b in group)
            self._pending -= sum(b.nbytes for b in group)
            self._cond.notify_all()
        return True


class StatsCheckpoint:
    """A rank's statistics so far, as files ``folder/{token}-000000.safetensors``, ..., the newest kept."""

    def __init__(self, folder: Path, token: str, rank: int, every: float | None) -> None:
        self.folder, self.token, self.rank, self.every = folder, token, rank, every
        self._count = 0
        self._previous: Path | None = None
        self._offered: tuple[Mapping[Label, RunningStats], list[dict[str, Any]], int] | None = None
        self._written = 0  # batches covered by the file on disk
        self._cond = threading.Condition()
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="hookscope-checkpoint", daemon=True)
        if every is not None:
            self._thread.start()

    def offer(self, table: Mapping[Label, RunningStats], covered: list[dict[str, Any]]) -> None:
        """The table after ``covered`` batches (a list only ever appended to; the table is not changed after)."""
        with self._cond:
            if self._error is not None:
                raise self._error
            self._offered = (table, covered, len(covered))

    def close(self) -> None:
        """Stop the thread and write the latest table offered; raise the thread's error."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()
        if self._error is not None:
            raise self._error
        self._write()

    def _run(self) -> None:
        assert self.every is not None
        while True:
            with self._cond:
                self._cond.wait(self.every)
                if self._closed:
                    return
            try:
                self._write()
            except BaseException as err:
                with self._cond:
                    self._error = err
                return

    def _write(self) -> None:
        with self._cond:
            offered = self._offered
        if offered is None or offered[2] == self._written:
            return
        table, covered, n = offered
        path = self.folder / shard_name(self.token, self._count)
        write_stats(path, table, {"rank": self.rank, "batches": covered[:n]})
        if self._previous is not None:
            self._previous.unlink(missing_ok=True)
        self._previous, self._count, self._written = path, self._count + 1, n
