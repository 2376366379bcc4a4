"""A store opened: ``load(path) -> Run``, a mapping ``site -> Record`` like a ``Capture``, tensors read on use.

``hookscope.load(path)`` reads the manifest only (``hookscope.store.format`` describes it). Records are built
from the manifest's index when a site is first asked for (``hookscope.store.record_reader``); every tensor
is a view of a memory-mapped shard, read from disk when it is used.

A store written by ``extract`` holds many batches: ``run[site].calls`` holds every call of
every batch in batch order, addressed by place (``hookscope.store.calls``: with one call per batch,
``calls[b]`` is batch ``b``, a lost one raising), and ``run.batch(b)`` the records of batch ``b``
alone, numbered within it. A statistics-only store has ``run.stats(site)``.

Every field of the manifest is checked before use (``hookscope.store.schema``), and the index of
tensors is vouched for (``hookscope.store.index``). A damaged shard (missing, a link, truncated,
its header, its rows or a tensor's bytes failing their checks) is left out: ``load`` checks every
shard's size, a shard's header is checked before its first tensor is handed out, and each tensor's
checksum the first time it is read (``load(path, verify=False)`` maps tensors without reading
them); ``run.check()`` checks every header at once (``verify=True``: every checksum, all bytes).
The batches it held leave ``run.batches`` with one ``StoreWarning`` naming the shard,
``run.damaged`` lists it, and ``run.batch(b)`` of such a batch raises ``DamagedShardError``;
every other batch reads as usual.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..base.display import Shows, table_of
from ..base.words import format_size
from ..core import kinds
from ..core.compiled import EagerNames, known_name
from ..core.kinds import Kind
from ..core.records import Label, Record, SitesPlot
from ..core.select import Selector
from ..core.store_sites import select_sites
from ..errors import DamagedShardError, NonFiniteError, NotCapturedError, StoreError
from ..stats.streaming import RunningStats
from . import contents as contents_
from . import series
from .contents import Contents
from .format import MANIFEST, Entry, index_parts, read_manifest
from .history import Alert, History
from .index import Index, ranges, wrong_sizes
from .record_reader import RecordReader
from .schema import check_index, with_target
from .shards import MappedShards, read_stats

T = TypeVar("T")


def load(path: str | os.PathLike[str], *, verify: bool = True) -> Run:
    """Open the store at ``path``: reads its manifest only (see ``hookscope.store.format``).

    ``verify``: check each tensor's CRC-32 the first time it is read (its bytes are read once then).

    Args:
        path: the store's folder (written by ``save``, ``extract`` or ``watch``).
        verify: check each tensor's CRC-32 the first time it is read; False trusts the bytes.

    Returns:
        The store as a ``Run``, a mapping of site name to ``Record``, tensors read when used.

    Raises:
        StoreError: ``path`` does not exist, holds no manifest, or its manifest is damaged.
    """
    root = Path(path)
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        what = "does not exist" if not root.exists() else "is not a hookscope store (no manifest.json)"
        raise StoreError(f"{root} {what}; make one with hookscope.save(cap, path) or hookscope.extract(...)")
    manifest = read_manifest(root)
    if manifest.get("status") != "complete":  # interrupted: the index from the shards' headers, checked the same
        manifest = {**manifest, **index_parts(root)}
    bad = check_index(manifest, str(manifest_path))
    return Run(root, {**manifest, "damaged": {**manifest.get("damaged", {}), **bad}}, verify=verify)


class Run(Mapping[str, Record], Shows, SitesPlot):
    """A store opened by ``load``: sites by name, like a ``Capture``; tensors read on use.

    Built by ``hookscope.load``, which reads and checks the manifest first.

    Args:
        root: the store's folder.
        manifest: its manifest (``manifest.json``), with the index of an unfinished store merged in.
        verify: check each tensor's CRC-32 the first time it is read.
    """

    def __init__(self, root: Path, manifest: dict[str, Any], *, verify: bool = True) -> None:
        self.path = root
        self.manifest = manifest
        self.provenance: dict[str, Any] = manifest.get("provenance", {})
        self.config: dict[str, Any] = with_target(manifest.get("config", {}))  # "loss": an older store
        self.complete = manifest.get("status") == "complete"
        self._sites = {s["name"]: s for s in manifest.get("sites", [])}
        vouched = bool(manifest.get("vouched")) or not self.complete  # an interrupted store: from the headers
        self._index = Index(root, manifest, trusted=vouched, headers_read=not self.complete)
        self.checked: str | None = None  # what ``check`` read: "headers", "data" (every CRC-32), or nothing yet
        self.damaged = self._index.damaged  # shard file -> what is wrong with it; its tensors are left out
        self._mapped = MappedShards(root, verify=verify)
        self._records: dict[str, Record] = {}
        self._reader = RecordReader(root, manifest, self._sites, self._index, self._mapped)
        self._stats: dict[Label, RunningStats] | None = None
        found = {**manifest.get("damaged", {}), **wrong_sizes(root, manifest.get("shards", []))}
        for file, why in found.items():
            self._leave_out(file, why)

    def __getitem__(self, site: str) -> Record:
        site = known_name(site, self._sites)  # "module.0" as a DDP / DataParallel / DeepSpeed model names "0"
        if site not in self._records:
            self._records[site] = self._intact(lambda: self._reader.record(site, batch=None))
        return self._records[site]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sites)

    def __len__(self) -> int:
        return len(self._sites)

    def __repr__(self) -> str:
        state = "complete" if self.complete else "interrupted"
        size = format_size(sum(s["bytes"] for s in self.manifest.get("shards", [])))
        return f"<Run {self.path.name}: {len(self)} sites, {len(self.batches)} batches, {size}, {state}>"

    def table(self) -> str:
        """The store's table of contents: what ``describe()`` (``hookscope info``) gives.

        Returns:
            The table, as text.
        """
        return table_of(self)

    @property
    def batches(self) -> list[int]:
        """The indices of the batches the store holds (less those of damaged shards), in order."""
        return self._index.batches()

    @property
    def lost(self) -> dict[int, str]:
        """The batches left out with a damaged shard, each with that shard's file (``damaged`` says why)."""
        return dict(self._index.lost())

    @property
    def rows(self) -> int | None:
        """Rows (samples) over the batches it holds; None when unknown (a saved capture)."""
        lost = self._index.lost()
        rows = [b.get("rows") for b in self.manifest.get("batches", []) if b["index"] not in lost]
        return None if None in rows else sum(r for r in rows if r is not None)

    def batch(self, index: int) -> dict[str, Record]:
        """The records of batch ``index`` alone: ``run.batch(3)["features.3"].output``.

        Args:
            index: a batch index of the loader (one of ``run.batches``).

        Returns:
            Site name -> the ``Record`` of that batch alone.

        Raises:
            NotCapturedError: the store does not hold batch ``index``.
            DamagedShardError: the shard that held it is damaged.
        """
        self._check_batch(index)
        records = self._intact(lambda: {site: self._reader.record(site, batch=index) for site in self._sites})
        self._check_batch(index)  # reading it may have found its shard damaged
        return EagerNames(records)  # found with a wrapper's "module." too

    def _check_batch(self, index: int) -> None:
        """Raise when batch ``index`` is not in the store, or was in a damaged shard."""
        file = self._index.lost().get(index)
        if file is not None:
            raise DamagedShardError(file, self.damaged[file], f"; batch {index} was in it, the others read as usual")
        if index not in self.batches:
            raise NotCapturedError(f"batch {index} is not in {self.path}; it holds {ranges(self.batches)}")

    def stats(self, site: str, kind: Kind = "output", key: str | None = None) -> RunningStats:
        """The statistics of ``site``'s ``kind`` at ``key`` (the first key without one), over the run.

        Args:
            site: the site's name.
            kind: the kind (default ``output``).
            key: the tensor's key; None takes the site's first key.

        Returns:
            The ``RunningStats`` over the whole run.

        Raises:
            NotCapturedError: the store holds no statistics of that site, kind and key (or is not a
                statistics-only store).
        """
        table = self.statistics()
        site = known_name(site, {label[0] for label in table})
        for label, stats in table.items():
            if label[:2] == (site, kind) and key in (None, label[2]):
                return stats
        held = ", ".join(sorted({f"{s} {k}" for s, k, _ in table})) or "none (not a statistics-only store)"
        raise NotCapturedError(f"no statistics of {site!r} {kind} {key or ''} in {self.path}; it holds {held}")

    def statistics(self) -> dict[Label, RunningStats]:
        """Every (site, kind, key) of a statistics-only run and its ``RunningStats``, in first-seen order.

        Returns:
            ``(site, kind, key)`` -> its ``RunningStats`` over the run; empty for other stores.
        """
        if self._stats is None:
            section = self.manifest.get("stats")
            self._stats = read_stats(self._mapped, section) if section else {}
        return self._stats

    def history(self, name: str) -> History:
        """The rows ``hookscope.watch`` logged for the module ``name`` (a watch store: ``hookscope.store.series``).

        Args:
            name: the watched module's dotted name.

        Returns:
            Its ``History``, one row per logged step.

        Raises:
            NotCapturedError: the store holds no history of ``name`` (the message names the closest ones).
        """
        return series.pick(self.histories(), name, self.path)

    def histories(self) -> dict[str, History]:
        """Every watched module's ``History``, in model order (empty for a store not written by ``watch``).

        Returns:
            Module name -> its ``History``.
        """
        return EagerNames(series.read_histories(self.path, self.manifest, self._mapped))  # "module.0" finds "0"

    def rank_histories(self) -> list[dict[str, History]]:
        """Each rank's own histories of a watch under torchrun, in rank order (empty for one process).

        Returns:
            Per rank, module name -> its ``History``.
        """
        return [EagerNames(h) for h in series.read_rank_histories(self.path, self.manifest, self._mapped)]

    def scalars(self) -> dict[str, list[tuple[int, float]]]:
        """The scalars ``w.log`` logged in a watch store, ``{name: [(step, value), ...]}`` (empty if none).

        Returns:
            Scalar name -> ``(step, value)`` pairs in step order.
        """
        return series.read_scalars(self.path, self.manifest, self._mapped)

    @property
    def alerts(self) -> list[Alert]:
        """The alerts ``hookscope.watch`` raised, in the order it raised them (empty for other stores)."""
        return series.read_alerts(self.manifest)

    @property
    def non_finite(self) -> NonFiniteError | None:
        """The ``NonFiniteError`` (``nan_guard``) that ended a watched run, as raised; None if none did."""
        return series.read_non_finite(self.manifest)

    def contents(self) -> list[Contents]:
        """One row per (site, kind, key): first shape, dtype, how many tensors, bytes on disk (aliases once).

        Returns:
            One ``Contents`` row per (site, kind, key), in store order.
        """
        first: dict[Label, Entry] = {}
        counts: dict[Label, list[int]] = {}
        seen: set[tuple[int, str]] = set()
        for entry in self._index.entries():
            label = (entry.site, entry.kind, entry.key)
            first.setdefault(label, entry)
            count = counts.setdefault(label, [0, 0])
            count[0] += 1
            if (entry.shard, entry.name) not in seen:
                seen.add((entry.shard, entry.name))
                count[1] += entry.offsets[1] - entry.offsets[0]
        rows = [
            Contents(*label[:1], self._type(label[0]), *label[1:], tuple(e.shape), e.dtype, *counts[label])
            for label, e in first.items()
        ]
        for (site, kind, key), s in self.statistics().items():
            rows.append(Contents(site, self._type(site), kind, key, s.shape or (), s.dtype or "?", s.updates, 0))
        place = {site: i for i, site in enumerate(self._sites)}
        return sorted(rows, key=lambda r: (place.get(r.site, len(place)), kinds.order(r.kind)))

    def describe(self) -> str:
        """What ``hookscope info`` prints: the store, its provenance, what is damaged, then one row per
        (site, kind, key). Checks every shard's header first (``check()``) unless done.

        Returns:
            The description, as text.
        """
        if self.checked is None and not series.is_watch(self.manifest):
            self.check()
        return contents_.describe(self)

    def check(self, *, verify: bool = False) -> dict[str, str]:
        """Check every shard's header and, with ``verify``, every tensor's CRC-32 (reading all of it): a damaged
        shard is left out, with one ``StoreWarning`` naming it and its batches. Returns ``damaged``.

        Args:
            verify: also read every tensor and check its CRC-32 (reads the whole store); False checks the
                shards' headers only.

        Returns:
            ``damaged``, shard file -> what is wrong with it (empty when nothing is).
        """
        held: dict[int, dict[str, Entry]] = {}  # shard -> its tensors by name (aliases once)
        for entry in map(Entry._make, self.manifest.get("tensors", []) if verify else []):
            held.setdefault(entry.shard, {})[entry.name] = entry
        for number, file in enumerate(self._index.files):
            if file in self.damaged:
                continue
            try:
                self._index.vouch(number)
                mapped, start = MappedShards(self.path, verify=True), self.manifest["shards"][number]["data_start"]
                for e in held.get(number, {}).values():  # a mapping of the shard's own, dropped after
                    mapped.tensor(file, start, e.dtype, e.shape, e.offsets, e.crc32)
            except DamagedShardError as err:
                self._leave_out(file, err.why)
        self.checked = "data" if verify or self.checked == "data" else "headers"
        return self.damaged

    def _type(self, site: str) -> str:
        return str(self._sites.get(site, {}).get("type", "?"))

    def site_types(self) -> dict[str, str]:
        """Each site's module class name, in the store's order (from the manifest: no tensor is read).

        Returns:
            Site name -> class name.
        """
        return {name: self._type(name) for name in self._sites}

    def _intact(self, build: Callable[[], T]) -> T:
        """``build()``, again without a shard each time one turns out damaged while it reads."""
        while True:
            try:
                return build()
            except DamagedShardError as err:  # noqa: PERF203 (a retry, once per damaged shard)
                if err.shard in self.damaged:
                    raise
                self._leave_out(err.shard, err.why)

    def _leave_out(self, file: str, why: str) -> None:
        """Take the damaged shard ``file`` out of the index (tensors read from other shards stay valid;
        records are built again without it)."""
        self._records.clear()
        self._index.leave_out(file, why)


def selected_sites(source: Mapping[str, Record], select: Selector | None) -> list[str]:
    """The sites of a store or a capture that ``select`` picks, as ``core.store_sites.select_sites`` says
    (None: every site); a ``SelectionError`` when one entry matches none."""
    types = source.site_types() if isinstance(source, Run) else {name: r.type for name, r in source.items()}
    where = f"the store {source.path}" if isinstance(source, Run) else f"the {type(source).__name__.lower()}"
    return select_sites(types, select, source=where)
