"""A capture on disk: ``save(cap, out)`` writes every tensor of it to a new store and opens it.

Also what every store records of where it came from (``provenance``, ``weights_hash``) and of
its sites, and ``entries``: one manifest entry per (site, kind, key, call) and each distinct tensor
once, which ``extract`` uses for each batch too. ``hookscope.store.format`` describes the folder.
"""

from __future__ import annotations

import ctypes
import datetime
import hashlib
import os
import platform
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .._version import __version__
from ..base.deprecation import renamed
from ..base.files import new_output, staged_folder
from ..base.words import parse_size
from ..core.call import Call
from ..core.compiled import unwrap
from ..core.layout import layout_id, to_json
from ..core.placement import describe, is_dtensor, local, this_rank
from ..core.records import Record
from ..core.tree import Layout
from ..errors import StoreWarning
from .format import SHARD_SIZE, SHARDS, cannot_write, index_parts, new_manifest, shard_name, write_manifest
from .names import by_entry
from .reader import Run, load
from .shards import dtype_name, write_shard


@renamed(path="out")
def save(
    cap: Mapping[str, Record],
    out: str | os.PathLike[str],
    *,
    force: bool = False,
    shard_size: int | str = SHARD_SIZE,
    graph: Any = None,
) -> Run:
    """Write every tensor of a capture to a new store at ``out`` and return it opened (``load``).

    The store is written next to ``out`` and renamed into place when complete; an existing
    ``out`` is replaced only with ``force`` and only when hookscope wrote it (``base.files.new_output``).
    Shards hold at most ``shard_size`` bytes (one tensor more; default ``store.format.SHARD_SIZE``, 256MB, as
    ``extract`` and ``export``).
    ``path=`` is the old spelling of ``out=``. ``graph``: a ``hookscope.Graph`` (``module_graph``) the
    store keeps in its manifest, for the report of the store to draw.

    Args:
        cap: a capture (any mapping of site name to ``Record``), after its block.
        out: the store's folder; it must not exist unless ``force``.
        force: replace an existing ``out`` that hookscope wrote (never a folder holding other files).
        shard_size: the most bytes per shard file, in bytes or as text (``"1GB"``).
        graph: a ``hookscope.Graph`` kept in the manifest; None keeps none.

    Returns:
        The store, opened (``load(out)``).

    Raises:
        OutputExistsError: ``out`` exists and ``force`` is False, or it holds files hookscope did not write.
        StoreError: the store cannot be written (a full disk, an unwritable folder); nothing is left behind.
    """
    root = new_output(out, force=force, kind="store")
    limit = parse_size(shard_size)
    with staged_folder(root, lambda err, folder: cannot_write(err, folder, root), parents=True) as staging:
        listed, tensors, table = entries(cap)
        listed, tensors = by_entry(listed, tensors)
        _name_pieces(listed)
        (staging / SHARDS).mkdir()
        for n, group in enumerate(_groups(listed, tensors, limit)):
            names = {e["name"] for e in group}
            meta = {"rank": 0, "batches": [{"index": 0, "rows": None}], "tensors": group, "layouts": table}
            write_shard(staging / SHARDS / shard_name("r0", n), {k: tensors[k] for k in names}, meta)
        header = new_manifest(provenance(getattr(cap, "model", None)), _config(cap), sites(cap))
        if graph is not None:
            header["graph"] = graph.as_dict()
        calls = [_call_meta(record.name, call) for record in cap.values() for call in record.calls]
        write_manifest(staging, {**header, **index_parts(staging), "status": "complete", "calls": calls})
    return load(root)


def _name_pieces(listed: list[dict[str, Any]]) -> None:
    """Warn that DTensors (FSDP2 gradients, tensor-parallel outputs) are stored as this rank's pieces."""
    pieces = [e for e in listed if "placement" in e]
    if pieces:
        e = pieces[0]
        warnings.warn(
            f"hookscope.store.save: {len(pieces)} captured tensors are DTensors (first: {e['site']!r} {e['kind']} "
            f"{e['key']}, a {e['placement']}); stored as rank {this_rank()}'s local pieces, each entry naming its "
            "placement; to store whole tensors, gather them with .full_tensor() on every rank before saving",
            StoreWarning,
            stacklevel=3,
        )


def sites(cap: Mapping[str, Record]) -> list[dict[str, Any]]:
    """The manifest's description of every site: name, type, kinds, parameters, why something is missing."""
    return [
        {
            "name": r.name,
            "type": r.type,
            "kinds": list(r.kinds),
            "params": list(r.param_grads),
            "missing": r.missing,
            "channels": r.channels,
        }
        for r in cap.values()
    ]


def provenance(model: nn.Module | None) -> dict[str, Any]:
    """Where a store came from: versions, the model's class and size, and the hash of its weights."""
    found: dict[str, Any] = {
        "hookscope": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    if model is not None:
        model = unwrap(model)  # a compiled model is described by the model it compiles
        found.update({
            "model": type(model).__name__, "model_module": type(model).__module__,
            "parameters": sum(p.numel() for p in model.parameters()), "weights_sha256": weights_hash(model),
        })  # fmt: skip
    return found


def weights_hash(model: nn.Module) -> str:
    """SHA-256 of the state dict: every name, dtype, shape and byte, in order (of a DTensor: this rank's piece)."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        data = local(tensor).cpu().contiguous()  # a DTensor's data_ptr is no address of its values
        digest.update(f"{name} {data.dtype} {tuple(data.shape)}\n".encode())
        if data.numel():  # the bytes where they are, without a copy; `data` stays alive meanwhile
            digest.update((ctypes.c_char * data.nbytes).from_address(data.data_ptr()))
    return digest.hexdigest()


def entries(
    cap: Mapping[str, Record], batch: int = 0, prefix: str = "t"
) -> tuple[list[dict[str, Any]], dict[str, Tensor], dict[str, Any]]:
    """One manifest entry per (site, kind, key, call) of ``batch``, its distinct tensors, each once,
    named ``{prefix}{n}`` (aliases, the same tensor object, share one name), and ``{id: layout JSON}``
    of the structures the entries name (an entry's ``layout``; "" for a plain tensor)."""
    names: dict[int, str] = {}
    tensors: dict[str, Tensor] = {}
    found = []
    ids: dict[int, tuple[str, Any]] = {}
    for record in cap.values():
        held = [(call.index, call.order, kind, key, t, _layout(call, kind, ids)) for call in record.calls
                for kind, d in call.tensors.items() for key, t in d.items()]  # fmt: skip
        held += [(k, -1, "param_grad", n, g, "") for n, gs in record.param_grads.items() for k, g in enumerate(gs)]
        for index, order, kind, key, tensor, layout in held:
            dtype_name(tensor.dtype)
            name = names.setdefault(id(tensor), f"{prefix}{len(names)}")
            # a DTensor: this rank's piece, its placement in the entry; any other tensor itself (no new view
            # object: core.pool reuses a copy's storage only when nothing else refers to it)
            tensors[name] = local(tensor) if is_dtensor(tensor) else tensor
            found.append({"site": record.name, "kind": kind, "key": key, "batch": batch, "call": index,
                          "order": order, "name": name, "layout": layout})  # fmt: skip
            if is_dtensor(tensor):
                found[-1]["placement"] = describe(tensor)
    return found, tensors, dict(ids.values())


def _layout(call: Call, kind: str, ids: dict[int, tuple[str, Any]]) -> str:
    """The id of ``call``'s layout for ``kind`` ("" for none); ``ids`` caches it per layout object."""
    layout: Layout | None = call.layouts.get(kind) if call.layouts else None
    if layout is None:
        return ""
    if id(layout) not in ids:
        data = to_json(layout)
        ids[id(layout)] = (layout_id(data), data)
    return ids[id(layout)][0]


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
