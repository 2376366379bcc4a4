"""The store on disk, in one file: its names, its manifest, how it is opened, resumed and finished.

A store is a folder::

    acts.hookscope/
      manifest.json                           format, version, status, provenance, config, sites, index
      shards/r0-1a2b3c4d-000000.safetensors   whole batches: rank 0, run 1a2b3c4d, shard 0
      stats.safetensors                       statistics-only stores: the merged RunningStats
      stats/r0-1a2b3c4d-000003.safetensors    while a statistics run is going: each rank's latest checkpoint
      .lock                                   while a run writes it: its process and host (``hookscope.store.lock``)

The manifest (``"format": "hookscope.store"``, ``"version": 2``, docs/guide/store-format.md) holds ``status``
(``running`` until the run finishes, then ``complete``), ``provenance`` (hookscope, torch and Python versions,
the model's class, parameter count and the SHA-256 of its state dict), ``config`` (selectors as
text, kinds, the reduction's name, statistics mode, processes), ``sites`` (name, type, kinds,
parameters, why something is missing), ``batches``, ``shards``, and ``tensors``: one row per
stored tensor, its columns named by ``tensor_columns`` (``Entry``'s fields), one line per row, so
a million tensors stay a quick read. ``layouts`` holds each distinct structure a call's value had
(a tuple, a dict, a ``ModelOutput``: ``hookscope.core.layout``), once, by id; a row's ``layout``
names it, so a store rebuilds ``.output`` as the capture did (a row of a plain tensor names none).
Tensors stored under several names (aliases) are written once and listed under each name.
Nothing is pickled: opening a store runs no code, and every field is checked before it is used
(``hookscope.store.schema``); the manifest's last line is the CRC-32 of the text before it.

Every file is written whole or not at all (``hookscope.base.files``), and every shard describes its own
tensors (``hookscope.store.shards``). So a store whose run was killed, its manifest still marked
``running``, is indexed from its shards (``index_parts``) and opens with every batch written;
a shard that cannot be read (truncated, its header damaged) is listed under ``damaged`` with the
reason and left out, the rest indexed as usual. ``open_for_extract(..., resume=True)`` keeps what
is there, moves damaged shards to ``damaged/`` (so their batches are extracted again) and clears
what a killed run left half done; ``finish`` indexes every shard, merges the statistics parts and
marks the store complete.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from ..base.files import TEMPORARY, move, new_output, sync_folder, write_atomically
from ..errors import DamagedShardError, OptionError, StoreError, StoreWarning
from . import lock
from .schema import check_manifest, with_target
from .shards import MappedShards, one_line, read_index, read_stats, write_stats

FORMAT = "hookscope.store"
VERSION = 2  # 2: tensors named site/kind/key/call/batch (docs/guide/store-format.md); 1 reads as before
MANIFEST = "manifest.json"
SHARDS = "shards"  # folder of tensor shards
STATS = "stats.safetensors"  # the merged statistics of a finished statistics-only store
STATS_PARTS = "stats"  # folder of per-rank statistics checkpoints while a run is going
DAMAGED = "damaged"  # folder where a resumed run moves the shards it cannot read
_END = "\n}\n"  # how the text of a manifest ends
# flush_every's one default (extract, watch, --flush-every): what a run finished is on disk within this many
# seconds (extract: plus one shard write; watch: at the end of the first step after it), so a kill loses no more
FLUSH_EVERY = 5.0
# Sizes, one default per idea (docs/guide/stores.md): SHARD_SIZE, one file a store or an export writes (save,
# extract, export: few files, yet a damaged one loses little); MAX_MEMORY, the tensors a streaming job holds in
SHARD_SIZE, MAX_MEMORY = "256MB", "1GB"  # memory (extract's finished batches, StoreStream's shuffle buffer)
_CRC = re.compile(r',\n "manifest_crc32": (\d{1,10})\n}\n\Z')
# what a resumed run must repeat
RESUME_SETTINGS = ("select", "kinds", "reduce", "stats_only", "per_channel", "target", "layout")


class Entry(NamedTuple):
    """One row of the manifest's ``tensors`` table (its ``tensor_columns``): a tensor and where it lies."""

    site: str
    kind: str
    key: str
    batch: int
    call: int
    order: int
    shard: int  # index into the manifest's shards
    name: str  # the tensor's name inside the shard (aliases share one)
    dtype: str
    shape: list[int]
    offsets: list[int]  # [begin, end) in the shard's data
    layout: str = ""  # the id of the structure the call's value had (manifest ``layouts``); "" for one tensor
    crc32: int = -1  # the CRC-32 of the tensor's bytes, checked when it is read; -1: none (an older store)


COLUMNS: tuple[str, ...] = Entry._fields


def shard_name(token: str, number: int) -> str:
    """``r0-1a2b3c4d-000012.safetensors``: the rank and run (``token``), then a sequence number."""
    return f"{token}-{number:06d}.safetensors"


# -- the manifest -------------------------------------------------------------------------------
def new_manifest(prov: dict[str, Any], config: dict[str, Any], sites: list[dict[str, Any]]) -> dict[str, Any]:
    """A manifest with no tensor yet, marked ``running``."""
    index = {"batches": [], "shards": [], "tensor_columns": list(COLUMNS), "tensors": [], "layouts": {}}
    return {"format": FORMAT, "version": VERSION, "status": "running", "provenance": prov, "config": config,
            "sites": sites, **index}  # fmt: skip


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the store at ``root``, every field but its index checked (``schema.check_manifest``)."""
    path = root / MANIFEST
    if path.is_symlink():
        raise StoreError(f"{path} is a symbolic link; a store holds plain files only (copy the file itself)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as err:  # ValueError: not UTF-8
        raise StoreError(f"cannot read {path}: {one_line(err)}") from err
    try:
        manifest = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise StoreError(f"{path} is damaged: it is not JSON ({one_line(err)[:80]}); write the store again") from err
    checked = check_manifest(manifest, str(path), VERSION)
    found = _CRC.search(text)
    checked["vouched"] = bool(found and zlib.crc32(text[: found.start()].encode()) == int(found.group(1)))
    checked.pop("manifest_crc32", None)
    return checked


def check_flush_every(flush_every: float | None) -> None:
    """``flush_every`` (``FLUSH_EVERY``) is a number of seconds above 0, or None (only at the end of the run)."""
    if flush_every is not None and (isinstance(flush_every, bool) or not isinstance(flush_every, (int, float))
                                    or not flush_every > 0):  # fmt: skip
        raise OptionError(f"flush_every must be a number of seconds above 0, or None, got {flush_every!r}")


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` atomically: one line per top-level key, one per row of a top-level list, and
    last the CRC-32 of the text before it (``"manifest_crc32"``: ``read_manifest`` says whether it holds)."""
    path = root / MANIFEST
    body = _dumps({k: v for k, v in manifest.items() if k not in ("manifest_crc32", "vouched")})[: -len(_END)]
    text = f'{body},\n "manifest_crc32": {zlib.crc32(body.encode())}{_END}'
    try:
        write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError as err:
        raise StoreError(f"cannot write {path}: {one_line(err)}") from err


def index_parts(root: Path) -> dict[str, Any]:
    """``batches``, ``shards``, ``tensors``, ``layouts``, ``stats`` and ``damaged`` (file -> why) from the
    shards and statistics parts on disk; a shard that cannot be read is listed as damaged, not indexed."""
    shards: list[dict[str, Any]] = []
    batches: dict[int, dict[str, Any]] = {}
    tensors: list[list[Any]] = []
    layouts: dict[str, Any] = {}
    damaged: dict[str, str] = {}
    for path, index in _readable(root, _listed(root, SHARDS), damaged):
        meta = index["meta"]
        shards.append({"file": f"{SHARDS}/{path.name}", "bytes": index["bytes"], "data_start": index["data_start"]})
        batches.update({b["index"]: {**b, "rank": meta.get("rank", 0)} for b in meta.get("batches", [])})
        layouts.update(meta.get("layouts", {}))
        tensors.extend(rows_of(index, len(shards) - 1))
    tensors.sort(key=lambda row: (row[COLUMNS.index("batch")], row[COLUMNS.index("order")]))
    parts = _stats_parts(root, damaged)
    for meta, _ in parts:
        batches.update({b["index"]: b for b in meta.get("batches", [])})
    found: dict[str, Any] = {"batches": [batches[b] for b in sorted(batches)], "shards": shards,
                             "tensor_columns": list(COLUMNS), "tensors": tensors, "layouts": layouts,
                             "damaged": damaged}  # fmt: skip
    if (root / STATS).is_file() or parts:
        found["stats"] = {"file": STATS} if not parts else {"parts": [p.relative_to(root).as_posix() for _, p in parts]}
    return found


def rows_of(index: dict[str, Any], number: int) -> list[list[Any]]:
    """The manifest's rows (``COLUMNS``) of the tensors the shard ``number`` holds, from its header (``read_index``)."""
    sums = index["meta"].get("crc32", {})
    rows = []
    for entry in index["meta"].get("tensors", []):
        where = dict(zip(("dtype", "shape", "offsets"), index["tensors"][entry["name"]], strict=True))
        row = {"layout": "", **entry, **where, "shard": number, "crc32": sums.get(entry["name"], -1)}
        rows.append([row[column] for column in COLUMNS])
    return rows


def _listed(root: Path, folder: str) -> list[Path]:
    """The ``.safetensors`` files of ``root/folder``, which must not be a link (a store holds none)."""
    path = root / folder
    if path.is_symlink():
        raise StoreError(f"{path} is a symbolic link; a store holds plain folders and files only, so it is not "
                         "followed (copy the folder itself into the store)")  # fmt: skip
    try:
        return sorted(path.glob("*.safetensors")) if path.is_dir() else []
    except OSError as err:
        raise StoreError(f"cannot read {path}: {one_line(err)}") from err


def _readable(root: Path, paths: list[Path], damaged: dict[str, str]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each of ``paths`` with its header (``read_index``), those that cannot be read named in ``damaged``."""
    for path in paths:
        try:
            index = read_index(path)
        except DamagedShardError as err:
            damaged[path.relative_to(root).as_posix()] = err.why
            continue
        yield path, index


def _stats_parts(root: Path, damaged: dict[str, str]) -> list[tuple[dict[str, Any], Path]]:
    """The newest readable checkpoint of every (rank, run) under ``stats/``, in the order of their first batch."""
    newest: dict[str, tuple[dict[str, Any], Path]] = {}
    for path, index in _readable(root, _listed(root, STATS_PARTS), damaged):
        newest[path.name.rsplit("-", 1)[0]] = (index["meta"], path)  # r0-1a2b3c4d-000012: the newest sorts last
    parts = list(newest.values())
    return sorted(parts, key=lambda part: min((b["index"] for b in part[0].get("batches", [])), default=-1))


# -- the life of an extracted store -------------------------------------------------------------
def open_for_extract(root: Path, header: dict[str, Any], *, resume: bool, force: bool) -> None:
    """Make the store ``root`` with the manifest ``header``, or reopen it to be continued (``resume``); either
    way this process holds its lock (``hookscope.store.lock``) until ``finish`` (or ``release``)."""
    if resume and (root / MANIFEST).is_file():
        lock.hold(root)
        try:
            _reopen(root, header)
        except BaseException:
            lock.release(root)
            raise
        return
    new_output(root, force=force, kind="store", resumable=True)
    make_folder(root, root, exist_ok=True)
    lock.hold(root)
    try:
        for old in (p for p in root.iterdir() if p.name != lock.LOCK):  # force: what hookscope wrote there goes
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
        make_folder(root / SHARDS, root)
        (root / STATS_PARTS).mkdir()
        sync_folder(root)
        write_manifest(root, header)
    except OSError as err:
        lock.release(root)
        raise cannot_write(err, root, root) from err
    except BaseException:
        lock.release(root)
        raise


def _reopen(root: Path, header: dict[str, Any]) -> None:
    """Continue the store ``root``: same settings, leftovers of a killed run cleared, damaged shards set aside."""
    old = read_manifest(root)
    _check_same(root, old, header)
    try:
        if old.get("status") == "complete" and (root / STATS).is_file():  # its merged statistics become a part
            (root / STATS_PARTS).mkdir(exist_ok=True)
            move(root / STATS, root / STATS_PARTS / shard_name("r0-previous", 0))
            sync_folder(root / STATS_PARTS)
        elif (root / STATS).is_file():  # a merge that a killed run did not finish; its parts are still there
            (root / STATS).unlink()
        remove_leftovers(root)
        set_aside(root, index_parts(root)["damaged"])
    except OSError as err:
        raise cannot_write(err, root, root) from err
    write_manifest(root, new_manifest(old.get("provenance", {}), old.get("config", {}), old.get("sites", [])))


def release(root: Path) -> None:
    """Let go of the store's lock (a run that ends without ``finish``: an error, Ctrl-C)."""
    lock.release(root)


def done_batches(root: Path) -> set[int]:
    """The batches a store already holds (a resumed run skips them)."""
    return {b["index"] for b in index_parts(root)["batches"]}


def finish(root: Path) -> None:
    """Index every shard and merge every statistics part into the final manifest, marked complete; let go
    of the lock."""
    try:
        manifest = {**read_manifest(root), **index_parts(root), "status": "complete"}
        if "stats" in manifest:
            table = read_stats(MappedShards(root), manifest["stats"])
            write_stats(root / STATS, table, {"batches": manifest["batches"]})
            manifest["stats"] = {"file": STATS}
        write_manifest(root, manifest)
        shutil.rmtree(root / STATS_PARTS, ignore_errors=True)
        remove_leftovers(root)
    finally:
        lock.release(root)


def set_aside(root: Path, damaged: dict[str, str]) -> None:
    """Move the ``damaged`` files to ``damaged/`` (kept for a look, out of the index), with one warning."""
    if not damaged:
        return
    (root / DAMAGED).mkdir(exist_ok=True)
    for relative in damaged:
        move(root / relative, root / DAMAGED / PurePosixPath(relative).name)
    for folder in {root / DAMAGED, root, *(root / PurePosixPath(r).parent for r in damaged)}:
        sync_folder(folder)
    listed = "; ".join(f"{name} ({why})" for name, why in damaged.items())
    warnings.warn(f"{root}: moved {len(damaged)} damaged file(s) to {DAMAGED}/, their batches are extracted again: "
                  f"{listed}", StoreWarning, stacklevel=4)  # fmt: skip


def remove_leftovers(root: Path) -> None:
    """Temporary files of shards a killed run was writing."""
    for folder in (root / SHARDS, root / STATS_PARTS, root):
        for tmp in folder.glob(f".*{TEMPORARY}") if folder.is_dir() else []:
            tmp.unlink(missing_ok=True)


def make_folder(path: Path, target: Path, *, exist_ok: bool = False) -> Path:
    """``mkdir`` (with its parents), each new folder's name synced to disk; a one-line ``StoreError`` naming
    the store that could not be written."""
    made = [p for p in (path, *path.parents) if not p.exists()][::-1]
    try:
        path.mkdir(parents=True, exist_ok=exist_ok)
        for folder in made:
            sync_folder(folder.parent)
    except OSError as err:
        raise cannot_write(err, path.parent, target) from err
    return path


def cannot_write(err: OSError, folder: Path, target: Path) -> StoreError:
    """The error for a store that cannot be made: ``cannot write the store X: reason (folder)``."""
    return StoreError(f"cannot write the store {target}: {err.strerror or err} ({folder})")


def _check_same(root: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    """A store is resumed only by the run that made it: same weights, selectors, kinds, reduction, mode."""
    was = with_target(old.get("config", {}))  # a store made before "target" wrote "loss"
    pairs = [(k, was.get(k), new["config"].get(k)) for k in RESUME_SETTINGS]
    weights = old.get("provenance", {}).get("weights_sha256"), new["provenance"]["weights_sha256"]
    pairs.append(("weights", *weights))
    differ = [f"{name} {was!r} (now {now!r})" for name, was, now in pairs if was != now]
    if differ:
        raise StoreError(f"cannot resume {root}: it was made with {'; '.join(differ)}; use the same settings")


def _dumps(value: object) -> str:
    """JSON with one line per top-level key, and one line per item of a top-level list (a row, a site)."""
    if not isinstance(value, dict):
        return json.dumps(value, allow_nan=False)
    lines = []
    for key, item in value.items():
        if isinstance(item, list) and item:
            item_text = "[\n  " + ",\n  ".join(json.dumps(v, allow_nan=False) for v in item) + "\n ]"
        else:
            item_text = json.dumps(item, allow_nan=False)
        lines.append(f" {json.dumps(key)}: {item_text}")
    return "{\n" + ",\n".join(lines) + "\n}\n"
