"""The background writer of ``extract``: batches in, shards out, memory bounded.

The model's thread hands each finished batch (its kept tensors) to ``ShardWriter.put`` and
goes on with the next one; a writer thread gathers batches into shards of about
``shard_size`` bytes and writes each one (``hookscope.store.shards.write_shard``: temporary name,
fsync, rename). A shard holds whole batches only, so a batch is either in the store or not.

Memory: ``pending`` counts the bytes handed over and not yet on disk. ``put`` waits while
``pending + batch > limit`` (unless nothing is pending: a batch larger than the limit still
goes through, alone), and asks the writer to flush what it gathered instead of waiting for a
full shard. Tensors held by hookscope therefore never exceed ``limit`` plus the batch being
computed. An error in the writer (a full disk) is raised by the next ``put`` or by ``close``.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

from .format import shard_name
from .shards import write_shard


@dataclass(frozen=True)
class Pending:
    """One finished batch: its manifest entries and its distinct tensors, by name."""

    index: int
    rows: int | None
    entries: list[dict[str, Any]]
    tensors: dict[str, Tensor]
    nbytes: int
    layouts: dict[str, Any] = field(default_factory=dict)  # id -> layout JSON, the structures entries name


class ShardWriter:
    """Writes ``Pending`` batches as shards ``folder/{prefix}-000000.safetensors``, ... in a thread."""

    def __init__(self, folder: Path, prefix: str, *, rank: int, limit: int, shard_size: int) -> None:
        self.folder, self.prefix, self.rank = folder, prefix, rank
        self.limit, self.shard_size = limit, min(shard_size, max(limit // 2, 1))
        self.written = 0  # bytes of tensors on disk
        self.batches: list[int] = []  # batches on disk, in the order written
        self._cond = threading.Condition()
        self._queue: deque[Pending] = deque()
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
            self._queue.append(batch)
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
        while True:
            with self._cond:
                while not self._queue and not self._closed and not (self._flush and group):
                    self._cond.wait()
                if self._queue:
                    group.append(self._queue.popleft())
                flush = (self._flush or self._closed) and not self._queue
                self._flush = False if flush else self._flush
                done = self._closed and not self._queue
            if group and (flush or sum(b.nbytes for b in group) >= self.shard_size):
                if not self._write(group):
                    return
                group = []
            if done:
                return

    def _write(self, group: list[Pending]) -> bool:
        tensors = {name: t for batch in group for name, t in batch.tensors.items()}
        meta = {
            "rank": self.rank,
            "batches": [{"index": b.index, "rows": b.rows} for b in group],
            "tensors": [e for b in group for e in b.entries],
            "layouts": {name: layout for b in group for name, layout in b.layouts.items()},
        }
        path = self.folder / shard_name(self.prefix, self._shards)
        try:
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
