"""A store's table of tensors as ``load`` reads it: by site and batch, less its damaged shards.

``Index(root, manifest)`` holds the manifest's ``tensors`` rows (``hookscope.store.format.Entry``)
and the shards left out (``damaged``: file -> why), with the batches each one cost (``lost``).
Rows were checked field by field when the store was opened (``hookscope.store.schema``). They are
vouched for by the manifest's own CRC-32 (``"manifest_crc32"``, its last line) or, in an interrupted
store, read from the shards' checked headers. When neither holds (an older store, or a manifest
edited after it was written), each shard is checked against its own header the first time one of
its tensors is read (``vouch``): the header must be one (its own checksum included) and describe
exactly the rows the manifest gives it, so a manifest cannot hand out a tensor under another name,
shape or checksum. A shard that fails is left out, its batches with it; the rest reads as usual.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import DamagedShardError, StoreError, StoreWarning
from .format import COLUMNS, Entry, rows_of
from .shards import inside, read_index

MAX_HEADER = 1 << 24  # bytes of a damaged header searched for batch names


class Index:
    """The rows of a store's manifest, less those of damaged shards (see the module docstring)."""

    def __init__(self, root: Path, manifest: dict[str, Any], *, trusted: bool, headers_read: bool = False) -> None:
        self.root, self.manifest = root, manifest
        self.trusted = trusted  # rows vouched for already: by the manifest's CRC-32, or read from the shards
        self.files = [shard["file"] for shard in manifest.get("shards", [])]  # shard number -> file
        self.damaged: dict[str, str] = {}  # shard file -> what is wrong with it; its tensors are left out
        self._sites: dict[str, dict[int, list[Entry]]] | None = None  # site -> batch -> entries, on first use
        self._lost: dict[int, str] | None = None  # batch -> the damaged shard that held it, on first use
        self._vouched: set[int] = set(range(len(self.files))) if headers_read else set()  # headers checked

    def entries(self) -> Iterator[Entry]:
        """Every row of the index, less those of the batches a damaged shard held part of."""
        rows = (Entry(*row) for row in self.manifest.get("tensors", []))
        lost = self.lost()
        return (e for e in rows if e.batch not in lost) if lost else rows

    def by_site(self) -> dict[str, dict[int, list[Entry]]]:
        """site -> batch -> its entries."""
        if self._sites is None:
            self._sites = {}
            for entry in self.entries():
                self._sites.setdefault(entry.site, {}).setdefault(entry.batch, []).append(entry)
        return self._sites

    def lost(self) -> dict[int, str]:
        """The batches with a tensor in a damaged shard, and that shard; for a shard no row names (its
        header unreadable in an interrupted store, or every row of it dropped as damaged: the manifest
        lists none of its sites), the batches its header still names."""
        if self._lost is None:
            rows = [Entry(*row) for row in self.manifest.get("tensors", [])] if self.damaged else []
            self._lost = {e.batch: self.files[e.shard] for e in rows if self.files[e.shard] in self.damaged}
            held = {e.batch for e in rows if self.files[e.shard] not in self.damaged}  # in intact shards
            named = {self.files[e.shard] for e in rows}
            for file in (f for f in self.damaged if f not in named):
                self._lost.update({b: file for b in named_batches(self.root, file) if b not in held | set(self._lost)})
        return self._lost

    def lost_places(self, site: str) -> list[tuple[int, int]]:
        """The (batch, call) places of ``site`` that the index names in lost batches."""
        lost = self.lost()
        rows = (Entry(*row) for row in self.manifest.get("tensors", [])) if lost else iter(())
        return [(e.batch, e.call) for e in rows if e.site == site and e.batch in lost]

    def batches(self) -> list[int]:
        """The indices of the batches the store holds, less those of damaged shards, in order."""
        lost = self.lost()
        return [b["index"] for b in self.manifest.get("batches", []) if b["index"] not in lost]

    def leave_out(self, file: str, why: str) -> None:
        """Take the damaged shard ``file`` out, with one ``StoreWarning`` naming the batches it cost."""
        self.damaged[file] = why
        self._sites, self._lost = None, None
        lost = sorted(b for b, f in self.lost().items() if f == file)
        gone = f"{ranges(lost)} left out" if lost else "nothing of the index was in it"
        warnings.warn(f"{self.root}: shard {file} is damaged ({why}); {gone}, the other {len(self.batches())} "
                      "batches read as usual (an extracted store: resume=True extracts them again)",
                      StoreWarning, stacklevel=5)  # fmt: skip

    def vouch(self, number: int) -> None:
        """Check shard ``number``'s header once (one read of it, before its first tensor is handed out): a
        ``DamagedShardError`` when it is damaged or, rows not vouched for, when it and the manifest differ."""
        if number in self._vouched:
            return
        file, shard = self.files[number], self.manifest["shards"][number]
        try:
            index = read_index(inside(self.root, file))
        except DamagedShardError as err:
            raise DamagedShardError(file, err.why) from err
        if (index["bytes"], index["data_start"]) != (shard["bytes"], shard["data_start"]):
            raise DamagedShardError(file, "the manifest gives it another size or data start than its header")
        if self.trusted:  # the rows are vouched for: the header need only be whole (its own checksum held)
            self._vouched.add(number)
            return
        width = len(self.manifest.get("tensor_columns", COLUMNS))
        held = Counter(_frozen(row) for row in self.manifest.get("tensors", []) if row[6] == number)
        told = Counter(_frozen(row[:width]) for row in rows_of(index, number))
        if held != told:
            raise DamagedShardError(file, "the manifest's rows for it differ from what its header says it holds")
        layouts = self.manifest.get("layouts", {})
        if any(layouts.get(name) != layout for name, layout in index["meta"].get("layouts", {}).items()):
            raise DamagedShardError(file, "the manifest's layouts differ from those its header holds")
        self._vouched.add(number)


NAMED = re.compile(rb'/call\d+/b(\d+)(?:-\d+)?"')  # a tensor's name in a header: ".../call0/b17"


def named_batches(root: Path, file: str) -> list[int]:
    """The batches the names in a damaged shard's header still give (its first ``MAX_HEADER`` bytes)."""
    try:
        with open(inside(root, file), "rb") as f:
            head = f.read(MAX_HEADER)
    except (OSError, DamagedShardError):
        return []
    return sorted({int(n) for n in NAMED.findall(head)})


def _frozen(row: list[Any]) -> tuple[Any, ...]:
    """A row as a hashable tuple (its shape and offsets as tuples)."""
    return tuple(tuple(v) if type(v) is list else v for v in row)


def wrong_sizes(root: Path, shards: list[dict[str, Any]]) -> dict[str, str]:
    """The shards whose file is missing, a link, or not the size the index says (truncated, or written over)."""
    wrong = {}
    for shard in shards:
        try:
            path = inside(root, shard["file"])
            size = path.stat().st_size if path.is_file() else None
        except DamagedShardError as err:
            wrong[shard["file"]] = err.why
            continue
        except OSError as err:
            raise StoreError(f"cannot read {root / shard['file']}: {err.strerror or err}") from err
        if size != shard["bytes"]:
            wrong[shard["file"]] = "missing" if size is None else f"{size} bytes where the index says {shard['bytes']}"
    return wrong


def ranges(indices: list[int]) -> str:
    """``no batch``, ``batch 3``, ``batches 3..7`` (consecutive) or ``12 batches, 3..40``."""
    if not indices:
        return "no batch"
    if len(indices) == 1:
        return f"batch {indices[0]}"
    if indices[-1] - indices[0] == len(indices) - 1:
        return f"batches {indices[0]}..{indices[-1]}"
    return f"{len(indices)} batches, {indices[0]}..{indices[-1]}"
