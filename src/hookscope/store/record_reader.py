"""A store's records built from its index: each tensor mapped from its shard once, calls put back in place.

``hookscope.store.reader.Run`` holds one ``RecordReader`` and asks it for a site's ``Record`` over the whole
run or over one batch. A tensor is a view of a memory-mapped shard (``hookscope.store.shards.MappedShards``),
its shard's header vouched for before the first one is handed out (``hookscope.store.index``); an alias (one
tensor stored under several names) comes back as one tensor object. A request's calls stored joined are split
back into the calls that were put in (``hookscope.store.joined``), and the calls of lost batches keep their
places (``hookscope.store.calls``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from ..base.words import closest
from ..core import kinds
from ..core.call import Call
from ..core.layout import from_json
from ..core.records import Record
from ..errors import NotCapturedError, StoreError
from .calls import Lost, arrange
from .format import Entry
from .index import Index
from .joined import call_rows, split_calls
from .shards import MappedShards


class RecordReader:
    """A store's records built from its index, each tensor mapped once (see the module docstring).

    Args:
        root: the store's folder.
        manifest: its manifest, with the index of an unfinished store merged in.
        sites: site name -> its row of the manifest's ``sites``, in store order.
        index: the store's ``Index`` (its ``damaged`` shards are left out).
        mapped: the store's memory-mapped shards.
    """

    def __init__(
        self, root: Path, manifest: dict[str, Any], sites: dict[str, Any], index: Index, mapped: MappedShards
    ) -> None:
        self.path, self.manifest, self.sites, self.index, self.mapped = root, manifest, sites, index, mapped
        self.tensors: dict[tuple[int, str], Tensor] = {}
        self.layouts: dict[str, Any] = {}  # layout id -> the layout, read on first use
        self.joined = call_rows(manifest.get("batches", []))  # batch -> its calls' rows, where stored joined

    def record(self, site: str, batch: int | None) -> Record:
        """The ``Record`` of ``site`` over the whole run (``batch`` None) or over batch ``batch`` alone.

        Args:
            site: the site's name, as the store holds it.
            batch: a batch index, its calls numbered within it; None for every batch in batch order.

        Returns:
            The record, its tensors views of the mapped shards.

        Raises:
            NotCapturedError: the store has no site ``site``.
            DamagedShardError: a shard the record reads from turns out damaged.
        """
        if site not in self.sites:
            raise NotCapturedError(_unknown(site, list(self.sites), self.path))
        info = self.sites[site]
        channels = info.get("channels")  # stores written before it have none
        record = Record(
            site,
            info["type"],
            tuple(info["kinds"]),
            missing=dict(info.get("missing", {})),
            channels=channels if isinstance(channels, int) and not isinstance(channels, bool) else None,
        )
        record.param_grads = {name: [] for name in info.get("params", [])}
        calls: dict[tuple[int, int], Call] = {}
        by_batch = self.index.by_site().get(site, {})
        for entry in (e for b in ([batch] if batch is not None else by_batch) for e in by_batch.get(b, [])):
            tensor = self.tensor(entry)
            if not kinds.per_call(entry.kind):
                record.param_grads.setdefault(entry.key, []).append(tensor)
                continue
            counts = self.joined.get(entry.batch)  # a request's calls stored joined (hookscope.store.joined)
            where = f"{site} {entry.kind} {entry.key} of batch {entry.batch}"
            for k, piece in enumerate([tensor] if counts is None else split_calls(tensor, counts, where)):
                call = calls.setdefault((entry.batch, entry.call + k), Call(site, 0, order=entry.order))
                call.tensors.setdefault(entry.kind, {})[entry.key] = piece
                if entry.layout:
                    call.set_layout((entry.kind,), self.layout(entry.layout))
        lost = self.index.lost()
        for meta in self.manifest.get("calls", []):
            if meta["site"] == site and batch in (None, meta["batch"]) and meta["batch"] not in lost:
                _restore_call(calls.setdefault((meta["batch"], meta["call"]), Call(site, 0)), meta)
        if batch is not None:
            record.set_calls([calls[k] for k in sorted(calls)])
            for i, call in enumerate(record.calls):
                call.index = i
            return record
        gone = {b: Lost(b, file, self.index.damaged[file]) for b, file in lost.items()}
        places = [(b, c + k) for b, c in self.index.lost_places(site) for k in range(len(self.joined.get(b, [0])))]
        record.set_calls(arrange(site, calls, places, gone))  # a lost joined request keeps a place per call
        return record

    def layout(self, name: str) -> Any:
        """The layout ``name`` of the manifest's ``layouts``, read on first use.

        Args:
            name: the layout's id, as an index row names it.

        Returns:
            The layout (``hookscope.core.layout``).

        Raises:
            StoreError: the manifest does not hold it.
        """
        if name not in self.layouts:
            data = self.manifest.get("layouts", {}).get(name)
            if data is None:
                raise StoreError(f"{self.path}: the manifest names layout {name!r} but does not hold it")
            self.layouts[name] = from_json(data)
        return self.layouts[name]

    def tensor(self, entry: Entry) -> Tensor:
        """The tensor of the index row ``entry``, mapped once (an alias is the same tensor object).

        Args:
            entry: a row of the store's index.

        Returns:
            A view of its memory-mapped shard.

        Raises:
            DamagedShardError: its shard's header, or (verifying) its bytes, fail their checks.
        """
        where = (entry.shard, entry.name)
        if where not in self.tensors:
            self.index.vouch(entry.shard)
            shard = self.manifest["shards"][entry.shard]
            self.tensors[where] = self.mapped.tensor(
                shard["file"], shard["data_start"], entry.dtype, entry.shape, entry.offsets, entry.crc32
            )
        return self.tensors[where]


def _restore_call(call: Call, meta: Mapping[str, Any]) -> None:
    call.order, call.error = meta.get("order", call.order), meta.get("error")
    call.missing.update(meta.get("missing", {}))
    call.watched.update(meta.get("watched", {}))


def _unknown(site: str, names: list[str], root: Path) -> str:
    hint = closest(site, names)
    return f"{site!r} is not a site of the store {root} ({len(names)} sites{hint}); list them with list(run)"
