"""Captures on disk: ``save(cap, path)``, ``load(path) -> Run``, and the store format.

A store is a folder::

    acts.hookscope/
      manifest.json              format, version, provenance, sites, and the index of every tensor
      shards/r0-1a2b3c4d-000000.safetensors    tensors of whole batches (standard safetensors)
      stats.safetensors          statistics-only runs: the merged RunningStats of every label

The manifest (``"format": "hookscope.store"``, ``"version": 1``) lists, for every tensor, its
site, kind, key, call and batch, the shard and the bytes that hold it, its dtype and shape (one
row per tensor, in the order ``tensor_columns`` names, so a million tensors stay a quick read);
and the provenance: hookscope, torch and Python versions, the model's class, parameter count
and the SHA-256 of its state dict, the selectors and kinds. Tensors stored under several names
(aliases: an ``nn.Identity``'s output, a layer's input that is the previous one's output) are
written once and listed under each name. Values are the raw bytes, so every dtype (bf16, fp16
included) comes back bit for bit. Nothing is pickled: loading a store runs no code.

``load`` reads ``manifest.json`` only and returns a ``Run`` (``hookscope.run``), a mapping
``site -> Record`` like a ``Capture``: ``run["features.3"].calls[0].output``,
``run[site].values()``, ``hookscope.gradient_flow(run)``; a tensor is a memory-mapped view,
read from disk when used (``hookscope.shards``).

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
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..core.records import Call, Record
from ..core.select import Selector
from ..errors import StoreError
from .reader import COLUMNS, Run
from .shards import dtype_name, parse_size, read_index, write_json, write_shard

FORMAT = "hookscope.store"
VERSION = 1
MANIFEST = "manifest.json"
SHARDS = "shards"
STATS = "stats.safetensors"
STATS_PARTS = "stats"


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
    tensors: list[list[Any]] = []
    files = sorted((root / SHARDS).glob("*.safetensors")) if (root / SHARDS).is_dir() else []
    for path in files:
        index = read_index(path)
        meta = index["meta"]
        number = len(shards)
        shards.append({"file": f"{SHARDS}/{path.name}", "bytes": index["bytes"], "data_start": index["data_start"]})
        batches.update({b["index"]: {**b, "rank": meta.get("rank", 0)} for b in meta.get("batches", [])})
        for entry in meta.get("tensors", []):
            where = dict(zip(("dtype", "shape", "offsets"), index["tensors"][entry["name"]], strict=True))
            tensors.append([{**entry, **where, "shard": number}[column] for column in COLUMNS])
    tensors.sort(key=lambda row: (row[COLUMNS.index("batch")], row[COLUMNS.index("order")]))
    parts = _stats_parts(root)
    if parts:
        for meta, _ in parts:
            batches.update({b["index"]: b for b in meta.get("batches", [])})
    found: dict[str, Any] = {"batches": [batches[b] for b in sorted(batches)], "shards": shards,
                             "tensor_columns": list(COLUMNS), "tensors": tensors}  # fmt: skip
    if (root / STATS).is_file() or parts:
        found["stats"] = {"file": STATS} if not parts else {"parts": [p.relative_to(root).as_posix() for _, p in parts]}
    return found


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
    index = {"batches": [], "shards": [], "tensor_columns": list(COLUMNS), "tensors": []}
    return {"format": FORMAT, "version": VERSION, "status": "running", "provenance": prov, "config": config,
            "sites": site_list, **index}  # fmt: skip


def sites(cap: Mapping[str, Record]) -> list[dict[str, Any]]:
    """The manifest's description of every site: name, type, kinds, parameters, why something is missing."""
    return [
        {"name": r.name, "type": r.type, "kinds": list(r.kinds), "params": list(r.param_grads), "missing": r.missing}
        for r in cap.values()
    ]


def provenance(model: nn.Module | None) -> dict[str, Any]:
    """Where a store came from: versions, the model's class and size, and the hash of its weights."""
    from .._version import __version__

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
    return {"source": "save", "kinds": list(getattr(cap, "kinds", ())), "select": list(cap)}  # what it selected


def _call_meta(site: str, call: Call) -> dict[str, Any]:
    return {"site": site, "batch": 0, "call": call.index, "order": call.order, "missing": call.missing,
            "error": call.error, "watched": call.watched}  # fmt: skip


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
