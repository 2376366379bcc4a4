"""Captures on disk: ``save(cap, path)``, ``load(path) -> Run``, and the store format.

A store is a folder::

    acts.hookscope/
      manifest.json              format, version, provenance, sites, and the index of every tensor
      shards/r0-1a2b3c4d-000000.safetensors    tensors of whole batches (standard safetensors)
      stats.safetensors          statistics-only runs: the merged RunningStats of every label

The manifest (``"format": "hookscope.store"``, ``"version": 1``) lists, for every tensor, its
site, kind, key, call and batch, the shard and the bytes that hold it, its dtype and shape;
and the provenance: hookscope, torch and Python versions, the model's class, parameter count
and the SHA-256 of its state dict, the selectors and kinds. Tensors stored under several names
(aliases: an ``nn.Identity``'s output, a layer's input that is the previous one's output) are
written once and listed under each name. Values are the raw bytes, so every dtype (bf16, fp16
included) comes back bit for bit. Nothing is pickled: loading a store runs no code.

``load`` reads ``manifest.json`` only; a tensor is a memory-mapped view, read from disk when
used (``hookscope.shards``). A ``Run`` is a mapping ``site -> Record``, like a ``Capture``:
``run["features.3"].calls[0].output``, ``run[site].values()``, ``hookscope.gradient_flow(run)``.
A store written by ``extract`` holds many batches: ``run[site].calls`` has every call of every
batch, in batch order, and ``run.batch(b)`` one batch's records alone.

A store whose run was killed has a manifest still marked ``"running"``: ``load`` then indexes
the shards themselves (each describes its own tensors), so it opens with every batch whose
shard was completed (``run.complete`` is False).
"""

from __future__ import annotations

import ctypes
import datetime
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .errors import NotCapturedError, OptionError
from .policy import Label
from .records import KINDS, Call, Kind, Record
from .running import RunningStats
from .select import Selector
from .shards import Mapped, StoreError, dtype_name, inside, read_index, write_json, write_shard

FORMAT = "hookscope.store"
VERSION = 1
MANIFEST = "manifest.json"
SHARDS = "shards"
STATS = "stats.safetensors"
STATS_PARTS = "stats"


@dataclass(frozen=True)
class Contents:
    """One (site, kind, key) of a store: what ``hookscope info`` prints."""

    site: str
    type: str
    kind: str
    key: str
    shape: tuple[int, ...]  # of the first tensor
    dtype: str
    tensors: int  # stored tensors (calls x batches), or statistics updates
    nbytes: int  # 0 for statistics


class Run(Mapping[str, Record]):
    """A store opened by ``load``: sites by name, like a ``Capture``; tensors read on use."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.path = root
        self.manifest = manifest
        self.provenance: dict[str, Any] = manifest.get("provenance", {})
        self.config: dict[str, Any] = manifest.get("config", {})
        self.complete = manifest.get("status") == "complete"
        self._sites = {s["name"]: s for s in manifest.get("sites", [])}
        self._by_site: dict[str, list[dict[str, Any]]] = {name: [] for name in self._sites}
        for entry in manifest.get("tensors", []):
            self._by_site.setdefault(entry["site"], []).append(entry)
        self._mapped = Mapped(root)
        self._records: dict[str, Record] = {}
        self._tensors: dict[tuple[int, str], Tensor] = {}
        self._stats: dict[Label, RunningStats] | None = None

    def __getitem__(self, site: str) -> Record:
        if site not in self._records:
            self._records[site] = self._record(site, batch=None)
        return self._records[site]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sites)

    def __len__(self) -> int:
        return len(self._sites)

    def __repr__(self) -> str:
        state = "complete" if self.complete else "interrupted"
        size = format_size(sum(s["bytes"] for s in self.manifest.get("shards", [])))
        return f"<Run {self.path.name}: {len(self)} sites, {len(self.batches)} batches, {size}, {state}>"

    @property
    def batches(self) -> list[int]:
        """The indices of the batches the store holds, in order."""
        return [b["index"] for b in self.manifest.get("batches", [])]

    @property
    def rows(self) -> int | None:
        """Rows (samples) over all batches; None when unknown (a saved capture)."""
        rows = [b.get("rows") for b in self.manifest.get("batches", [])]
        return None if None in rows else sum(r for r in rows if r is not None)

    def batch(self, index: int) -> dict[str, Record]:
        """The records of batch ``index`` alone: ``run.batch(3)["features.3"].output``."""
        if index not in self.batches:
            raise NotCapturedError(f"batch {index} is not in {self.path}; it holds {_ranges(self.batches)}")
        return {site: self._record(site, batch=index) for site in self._sites}

    def stats(self, site: str, kind: Kind = "output", key: str | None = None) -> RunningStats:
        """The statistics of ``site``'s ``kind`` at ``key`` (the first key without one), over the run."""
        table = self.statistics()
        for label, stats in table.items():
            if label[:2] == (site, kind) and key in (None, label[2]):
                return stats
        held = ", ".join(sorted({f"{s} {k}" for s, k, _ in table})) or "none (not a statistics-only store)"
        raise NotCapturedError(f"no statistics of {site!r} {kind} {key or ''} in {self.path}; it holds {held}")

    def statistics(self) -> dict[Label, RunningStats]:
        """Every (site, kind, key) of a statistics-only run and its ``RunningStats``, in first-seen order."""
        if self._stats is None:
            section = self.manifest.get("stats")
            self._stats = read_stats(self._mapped, section) if section else {}
        return self._stats

    def contents(self) -> list[Contents]:
        """One row per (site, kind, key): first shape, dtype, how many tensors, bytes on disk (aliases once)."""
        first: dict[Label, dict[str, Any]] = {}
        counts: dict[Label, list[int]] = {}
        seen: set[tuple[int, str]] = set()
        for entry in self.manifest.get("tensors", []):
            label = (entry["site"], entry["kind"], entry["key"])
            first.setdefault(label, entry)
            count = counts.setdefault(label, [0, 0])
            count[0] += 1
            if (entry["shard"], entry["name"]) not in seen:
                seen.add((entry["shard"], entry["name"]))
                count[1] += entry["offsets"][1] - entry["offsets"][0]
        rows = [
            Contents(*label[:1], self._type(label[0]), *label[1:], tuple(e["shape"]), e["dtype"], *counts[label])
            for label, e in first.items()
        ]
        for (site, kind, key), s in self.statistics().items():
            rows.append(Contents(site, self._type(site), kind, key, s.shape or (), s.dtype or "?", s.updates, 0))
        place = {site: i for i, site in enumerate(self._sites)}
        return sorted(rows, key=lambda r: (place.get(r.site, len(place)), KINDS.index(r.kind)))

    def _type(self, site: str) -> str:
        return str(self._sites.get(site, {}).get("type", "?"))

    # -- building records from the index ------------------------------------------------------
    def _record(self, site: str, batch: int | None) -> Record:
        if site not in self._sites:
            raise NotCapturedError(_unknown(site, list(self._sites), self.path))
        info = self._sites[site]
        record = Record(site, info["type"], tuple(info["kinds"]), missing=dict(info.get("missing", {})))
        record.param_grads = {name: [] for name in info.get("params", [])}
        calls: dict[tuple[int, int], Call] = {}
        for entry in self._by_site[site]:
            if batch is not None and entry["batch"] != batch:
                continue
            tensor = self._tensor(entry)
            if entry["kind"] == "param_grad":
                record.param_grads.setdefault(entry["key"], []).append(tensor)
                continue
            call = calls.setdefault((entry["batch"], entry["call"]), Call(site, 0, order=entry.get("order", -1)))
            call.tensors.setdefault(entry["kind"], {})[entry["key"]] = tensor
        for meta in self.manifest.get("calls", []):
            if meta["site"] == site and batch in (None, meta["batch"]):
                _restore_call(calls.setdefault((meta["batch"], meta["call"]), Call(site, 0)), meta)
        record.calls = [calls[k] for k in sorted(calls)]
        for i, call in enumerate(record.calls):
            call.index = i
        return record

    def _tensor(self, entry: dict[str, Any]) -> Tensor:
        where = (entry["shard"], entry["name"])
        if where not in self._tensors:
            shard = self.manifest["shards"][entry["shard"]]
            self._tensors[where] = self._mapped.tensor(
                shard["file"], shard["data_start"], entry["dtype"], entry["shape"], entry["offsets"]
            )
        return self._tensors[where]


def load(path: str | os.PathLike[str]) -> Run:
    """Open the store at ``path``: reads its manifest only (see the module docstring)."""
    root = Path(path)
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        what = "does not exist" if not root.exists() else "is not a hookscope store (no manifest.json)"
        raise StoreError(f"{root} {what}; make one with hookscope.save(cap, path) or hookscope.extract(...)")
    manifest = read_manifest(root)
    if manifest.get("status") != "complete":
        manifest = {**manifest, **index_parts(root)}
    return Run(root, manifest)


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the store at ``root``, checked for format and version."""
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise StoreError(f"cannot read {root / MANIFEST}: {err}") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise StoreError(f"{root / MANIFEST} is not a hookscope store manifest")
    if manifest.get("version", 0) > VERSION:
        raise StoreError(
            f"{root} was written by a newer hookscope (store version {manifest['version']}, this one reads "
            f"{VERSION}); upgrade hookscope"
        )
    return manifest


def index_parts(root: Path) -> dict[str, Any]:
    """``batches``, ``shards``, ``tensors`` and ``stats`` from the shards and statistics parts on disk."""
    shards: list[dict[str, Any]] = []
    batches: dict[int, dict[str, Any]] = {}
    tensors: list[dict[str, Any]] = []
    files = sorted((root / SHARDS).glob("*.safetensors")) if (root / SHARDS).is_dir() else []
    for path in files:
        index = read_index(path)
        meta = index["meta"]
        number = len(shards)
        shards.append({"file": f"{SHARDS}/{path.name}", "bytes": index["bytes"], "data_start": index["data_start"]})
        batches.update({b["index"]: {**b, "rank": meta.get("rank", 0)} for b in meta.get("batches", [])})
        for entry in meta.get("tensors", []):
            dtype, shape, offsets = index["tensors"][entry["name"]]
            tensors.append({**entry, "shard": number, "dtype": dtype, "shape": shape, "offsets": offsets})
    tensors.sort(key=lambda e: (e["batch"], e.get("order", -1)))
    parts = _stats_parts(root)
    if parts:
        for meta, _ in parts:
            batches.update({b["index"]: b for b in meta.get("batches", [])})
    found: dict[str, Any] = {"batches": [batches[b] for b in sorted(batches)], "shards": shards, "tensors": tensors}
    if (root / STATS).is_file() or parts:
        found["stats"] = {"file": STATS} if not parts else {"parts": [p.relative_to(root).as_posix() for _, p in parts]}
    return found


# -- statistics files ---------------------------------------------------------------------------
def write_stats(path: Path, table: Mapping[Label, RunningStats], meta: Mapping[str, Any]) -> None:
    """Write a statistics table (one safetensors file, labels in its metadata) atomically."""
    tensors: dict[str, Tensor] = {}
    labels = []
    for i, ((site, kind, key), stats) in enumerate(table.items()):
        tensors.update({f"s{i}.{name}": t for name, t in stats.to_tensors().items()})
        labels.append({
            "site": site, "kind": kind, "key": key, "prefix": f"s{i}", "channel_dim": stats.channel_dim,
            "shape": list(stats.shape or ()), "dtype": stats.dtype,
        })  # fmt: skip
    write_shard(path, tensors, {**meta, "labels": labels})


def read_stats(mapped: Mapped, section: Mapping[str, Any]) -> dict[Label, RunningStats]:
    """The merged table of a store's ``stats`` section (one file, or the parts of an interrupted run)."""
    files = section["parts"] if "parts" in section else [section["file"]]
    tables = [_read_table(mapped, f) for f in files]
    return merge_tables(tables)


def merge_tables(tables: Sequence[Mapping[Label, RunningStats]]) -> dict[Label, RunningStats]:
    """Label by label, the merge of every table, in order; labels in first-seen order."""
    merged: dict[Label, RunningStats] = {}
    for table in tables:
        for label, stats in table.items():
            merged[label] = merged[label].merge(stats) if label in merged else stats
    return merged


def _read_table(mapped: Mapped, relative: str) -> dict[Label, RunningStats]:
    index = read_index(inside(mapped.root, relative))
    table = {}
    for label in index["meta"].get("labels", []):
        prefix = label["prefix"] + "."
        named = {
            name.removeprefix(prefix): mapped.tensor(relative, index["data_start"], *index["tensors"][name])
            for name in index["tensors"]
            if name.startswith(prefix)
        }
        stats = RunningStats.from_tensors(named, channel_dim=label["channel_dim"])
        stats.shape, stats.dtype = tuple(label["shape"]), label["dtype"]
        table[(label["site"], label["kind"], label["key"])] = stats
    return table


def _stats_parts(root: Path) -> list[tuple[dict[str, Any], Path]]:
    """The newest checkpoint of every (rank, run) under ``stats/``, in the order of their first batch."""
    folder = root / STATS_PARTS
    newest: dict[str, Path] = {}
    for path in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        newest[path.name.rsplit("-", 1)[0]] = path  # r0-1a2b3c4d-000012: the sequence number sorts last
    parts = [(read_index(p)["meta"], p) for p in newest.values()]
    return sorted(parts, key=lambda part: min((b["index"] for b in part[0].get("batches", [])), default=-1))


# -- saving a capture ---------------------------------------------------------------------------
def save(
    cap: Mapping[str, Record], path: str | os.PathLike[str], *, force: bool = False, shard_size: int | str = "1GB"
) -> Run:
    """Write every tensor of a capture to a new store at ``path`` and return it opened (``load``).

    The store is written next to ``path`` and renamed into place when complete; an existing
    ``path`` is refused unless ``force``. Shards hold at most ``shard_size`` bytes (one tensor more).
    """
    root = Path(os.path.abspath(path))
    if root.exists() and not force:
        raise StoreError(f"{root} already exists; pass force=True to replace it, or pick another path")
    staging = make_folder(root.parent / f".{root.name}.tmp-{secrets.token_hex(4)}", root)
    try:
        listed, tensors = entries(cap)
        (staging / SHARDS).mkdir()
        for n, group in enumerate(_groups(listed, tensors, parse_size(shard_size))):
            names = {e["name"] for e in group}
            meta = {"rank": 0, "batches": [{"index": 0, "rows": None}], "tensors": group}
            write_shard(staging / SHARDS / f"r0-{n:06d}.safetensors", {k: tensors[k] for k in names}, meta)
        header = new_manifest(provenance(getattr(cap, "model", None)), _config(cap), sites(cap))
        calls = [_call_meta(record.name, call) for record in cap.values() for call in record.calls]
        write_json(staging / MANIFEST, {**header, **index_parts(staging), "status": "complete", "calls": calls})
        _publish(staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return load(root)


def new_manifest(prov: dict[str, Any], config: dict[str, Any], site_list: list[dict[str, Any]]) -> dict[str, Any]:
    """A manifest with no tensor yet, marked ``running``."""
    return {"format": FORMAT, "version": VERSION, "status": "running", "provenance": prov, "config": config,
            "sites": site_list, "batches": [], "shards": [], "tensors": []}  # fmt: skip


def sites(cap: Mapping[str, Record]) -> list[dict[str, Any]]:
    """The manifest's description of every site: name, type, kinds, parameters, why something is missing."""
    return [
        {"name": r.name, "type": r.type, "kinds": list(r.kinds), "params": list(r.param_grads), "missing": r.missing}
        for r in cap.values()
    ]


def provenance(model: nn.Module | None) -> dict[str, Any]:
    """Where a store came from: versions, the model's class and size, and the hash of its weights."""
    from . import __version__

    found: dict[str, Any] = {
        "hookscope": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    if model is not None:
        found.update({
            "model": type(model).__name__, "model_module": type(model).__module__,
            "parameters": sum(p.numel() for p in model.parameters()), "weights_sha256": weights_hash(model),
        })  # fmt: skip
    return found


def weights_hash(model: nn.Module) -> str:
    """SHA-256 of the state dict: every name, dtype, shape and byte, in order."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        data = tensor.detach().cpu().contiguous()
        digest.update(f"{name} {data.dtype} {tuple(data.shape)}\n".encode())
        if data.numel():  # the bytes where they are, without a copy; `data` stays alive meanwhile
            digest.update((ctypes.c_char * data.nbytes).from_address(data.data_ptr()))
    return digest.hexdigest()


def describe_selector(select: Selector | None) -> list[str] | None:
    """Selectors as text for the manifest: names and globs as they are, types and functions by name."""
    if select is None:
        return None
    items = select if isinstance(select, (list, tuple)) else [select]
    return [_selector_text(s) for s in items]


def make_folder(path: Path, target: Path) -> Path:
    """``mkdir`` with a one-line ``StoreError`` naming the store that could not be written."""
    try:
        path.mkdir(parents=True)
    except OSError as err:
        raise StoreError(f"cannot write the store {target}: {err.strerror or err} ({path.parent})") from err
    return path


def _selector_text(select: object) -> str:
    if isinstance(select, str):
        return select
    if isinstance(select, type):
        return f"type:{select.__module__}.{select.__qualname__}"
    if isinstance(select, nn.Module):
        return f"module:{type(select).__name__}"
    return f"callable:{getattr(select, '__qualname__', type(select).__name__)}"


def entries(
    cap: Mapping[str, Record], batch: int = 0, prefix: str = "t"
) -> tuple[list[dict[str, Any]], dict[str, Tensor]]:
    """One manifest entry per (site, kind, key, call) of ``batch`` and its distinct tensors, each once,
    named ``{prefix}{n}``: aliases (the same tensor object) share one name."""
    names: dict[int, str] = {}
    tensors: dict[str, Tensor] = {}
    found = []
    for record in cap.values():
        held = [(call.index, call.order, kind, key, t) for call in record.calls for kind, d in call.tensors.items()
                for key, t in d.items()]  # fmt: skip
        held += [(k, -1, "param_grad", name, g) for name, gs in record.param_grads.items() for k, g in enumerate(gs)]
        for index, order, kind, key, tensor in held:
            dtype_name(tensor.dtype)
            name = names.setdefault(id(tensor), f"{prefix}{len(names)}")
            tensors[name] = tensor
            found.append({"site": record.name, "kind": kind, "key": key, "batch": batch, "call": index,
                          "order": order, "name": name})  # fmt: skip
    return found, tensors


def _groups(entries: list[dict[str, Any]], tensors: dict[str, Tensor], limit: int) -> list[list[dict[str, Any]]]:
    """Entries split into shards of at most ``limit`` bytes; an alias goes where its tensor is."""
    groups: list[list[dict[str, Any]]] = [[]]
    shard_of: dict[str, int] = {}
    size = 0
    for entry in entries:
        name = entry["name"]
        if name not in shard_of:
            if groups[-1] and size + tensors[name].nbytes > limit:
                groups.append([])
                size = 0
            shard_of[name] = len(groups) - 1
            size += tensors[name].nbytes
        groups[shard_of[name]].append(entry)
    return groups


def _config(cap: Mapping[str, Record]) -> dict[str, Any]:
    return {"source": "save", "kinds": list(getattr(cap, "kinds", ())), "select": None}


def _call_meta(site: str, call: Call) -> dict[str, Any]:
    return {"site": site, "batch": 0, "call": call.index, "order": call.order, "missing": call.missing,
            "error": call.error, "watched": call.watched}  # fmt: skip


def _restore_call(call: Call, meta: Mapping[str, Any]) -> None:
    call.order, call.error = meta.get("order", call.order), meta.get("error")
    call.missing.update(meta.get("missing", {}))
    call.watched.update(meta.get("watched", {}))


def _publish(staging: Path, root: Path) -> None:
    """Rename ``staging`` to ``root``; an existing ``root`` is set aside first and removed after."""
    old = root.with_name(f".{root.name}.old-{secrets.token_hex(4)}") if root.exists() else None
    if old is not None:
        os.replace(root, old)
    try:
        os.replace(staging, root)
    except BaseException:
        if old is not None:
            os.replace(old, root)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _unknown(site: str, names: list[str], root: Path) -> str:
    import difflib

    close = difflib.get_close_matches(site, names, n=3, cutoff=0.4)
    hint = f"; closest: {', '.join(repr(c) for c in close)}" if close else ""
    return f"{site!r} is not a site of the store {root} ({len(names)} sites{hint}); list them with list(run)"


def _ranges(indices: list[int]) -> str:
    if not indices:
        return "no batch"
    return f"{len(indices)} batches, {indices[0]}..{indices[-1]}"


def format_size(nbytes: float) -> str:
    """``1234567`` -> ``"1.2 MB"`` (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(nbytes) < 1000:
            return f"{nbytes:.0f} B" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} TB"


def parse_size(size: int | str) -> int:
    """``"2GB"``, ``"512 MiB"``, ``"1.5G"`` or a number of bytes -> bytes; a one-line error otherwise."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?)[bB]?\s*", str(size))
    if not match or float(match.group(1)) <= 0:
        raise OptionError(f"a size must be a positive number of bytes or a string like '2GB' or '512MiB', got {size!r}")
    base = 1024 if match.group(3) else 1000
    return int(float(match.group(1)) * base ** " KMGT".index(match.group(2).upper() or " "))
