"""A shard's header checked before use: the safetensors table and the ``"hookscope"`` metadata in it.

``check_shard(raw, size, file)`` returns what ``hookscope.store.shards.read_index`` gives, or raises
``DamagedShardError`` naming the shard and the field: every tensor's dtype, shape and offsets fit the
file; every entry names a tensor of the shard and a batch the shard lists; layouts, checksums and
statistics labels are of their form. ``index_checksum`` is the CRC-32 a shard's index carries
(``"index_crc32"``: its tensors' names, dtypes and shapes and its metadata), written by ``write_shard``
and checked here; shards written before it existed are read as before, their fields checked.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from ..core import kinds
from ..errors import DamagedShardError
from ..stats.moments import Moments
from .fields import (
    ITEMSIZE,
    MAX_DIMS,
    Wrong,
    a_list,
    an_object,
    check_batch,
    check_layout,
    each,
    fits,
    is_int,
    loads,
    need,
    text,
    text_map,
    texts,
    whole,
    wholes,
)

SAFETENSORS = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
               "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn",
               "F8_E5M2": "float8_e5m2", "U16": "uint16", "U32": "uint32", "U64": "uint64"}  # fmt: skip


def check_shard(raw: bytes, size: int, file: str) -> dict[str, Any]:
    """A shard's header (the JSON after its 8-byte length) as ``read_index`` returns it:
    ``{"bytes", "data_start", "meta", "tensors": {name: (dtype, shape, [begin, end])}}``."""
    try:
        header = an_object(loads(raw, "the header"), "the header")
        metadata = text_map(header.pop("__metadata__", {}), "__metadata__")
        meta = an_object(loads(metadata.get("hookscope", "{}"), "__metadata__.hookscope"), "__metadata__.hookscope")
        data = size - 8 - len(raw)
        tensors = {name: _header_entry(info, name, data) for name, info in header.items()}
        _check_meta(meta, tensors)
    except Wrong as wrong:
        raise DamagedShardError(file, str(wrong)) from None
    if "index_crc32" in meta and index_checksum(tensors, meta) != meta["index_crc32"]:
        raise DamagedShardError(file, "its header fails its checksum (index_crc32): it changed after it was written")
    return {"bytes": size, "data_start": 8 + len(raw), "meta": meta, "tensors": tensors}


def index_checksum(tensors: Mapping[str, tuple[str, list[int], Any]], meta: Mapping[str, Any]) -> int:
    """The CRC-32 of a shard's tensor names, dtypes and shapes and of its metadata (less this checksum)."""
    named = sorted([name, dtype, list(shape)] for name, (dtype, shape, *_) in tensors.items())
    rest = {k: v for k, v in meta.items() if k != "index_crc32"}
    return zlib.crc32(json.dumps([named, rest], sort_keys=True, separators=(",", ":")).encode())


def _header_entry(info: object, name: str, data: int) -> tuple[str, list[int], list[int]]:
    if type(info) is dict and info.keys() == {"dtype", "shape", "data_offsets"}:  # the quick path
        code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if (type(code) is str and code in SAFETENSORS and type(shape) is list and len(shape) <= MAX_DIMS
                and all(type(n) is int and n >= 0 for n in shape) and type(offsets) is list and len(offsets) == 2
                and type(offsets[0]) is int and type(offsets[1]) is int and 0 <= offsets[0] <= offsets[1] <= data
                and offsets[1] - offsets[0] == math.prod(shape) * ITEMSIZE[SAFETENSORS[code]]):  # fmt: skip
            return SAFETENSORS[code], shape, offsets
    where = f"tensor {name!r}"
    info = an_object(info, where)
    code = info.get("dtype")
    need(isinstance(code, str) and code in SAFETENSORS, f"{where}.dtype", "a dtype hookscope reads", code)
    dtype = SAFETENSORS[str(code)]
    shape, offsets = info.get("shape"), info.get("data_offsets")
    fits(dtype, shape, offsets, data, f"{where} ")
    return dtype, list(shape), list(offsets)  # type: ignore[arg-type]  # fits checked both


def _check_meta(meta: Mapping[str, Any], tensors: Mapping[str, Any]) -> None:
    """The ``"hookscope"`` metadata: rank, batches, tensors (each naming a tensor of the shard), layouts, checksums."""
    if "rank" in meta:
        whole(meta["rank"], "rank")
    listed = [b["index"] for b in each(meta.get("batches", []), "batches", check_batch)]
    need(len(set(listed)) == len(listed), "batches", "a list of distinct batches", listed)
    batches, known = set(listed), frozenset(kinds.names())
    for i, entry in enumerate(a_list(meta.get("tensors", []), "tensors")):
        if not _entry_fits(entry, tensors, batches, known):
            _check_entry(entry, f"tensors[{i}]", tensors, batches)
    for name, layout in an_object(meta.get("layouts", {}), "layouts").items():
        check_layout(layout, f"layouts[{name!r}]")
    for name, value in an_object(meta.get("crc32", {}), "crc32").items():
        whole(value, f"crc32[{name!r}]", 0, 0xFFFFFFFF)
    if "index_crc32" in meta:
        whole(meta["index_crc32"], "index_crc32", 0, 0xFFFFFFFF)
    each(meta.get("labels", []), "labels", lambda label, where: _check_label(label, where, tensors))
    texts(meta.get("columns", []), "columns")


# ``placement``: a DTensor stored as this rank's piece names its placement (store/save.py)
ENTRY_FIELDS = frozenset({"site", "kind", "key", "name", "batch", "call", "order", "layout", "placement"})


def _entry_fits(entry: object, tensors: Mapping[str, Any], batches: set[int], known: frozenset[str]) -> bool:
    """``_check_entry``'s checks, quickly: True when all hold."""
    if type(entry) is not dict or not entry.keys() <= ENTRY_FIELDS:
        return False
    site, kind, key, name = entry.get("site"), entry.get("kind"), entry.get("key"), entry.get("name")
    batch, call, order = entry.get("batch"), entry.get("call"), entry.get("order")
    return (type(site) is str and type(kind) is str and kind in known and type(key) is str and type(name) is str
            and name in tensors and type(batch) is int and batch in batches and type(call) is int and call >= 0
            and type(order) is int and order >= -1 and type(entry.get("layout", "")) is str
            and type(entry.get("placement", "")) is str)  # fmt: skip


def _check_entry(entry: object, where: str, tensors: Mapping[str, Any], batches: set[int]) -> None:
    entry = an_object(entry, where)
    for name in ("site", "kind", "key", "name"):
        need(name in entry, f"{where}.{name}", "present", "nothing")
        text(entry[name], f"{where}.{name}")
    need(entry["kind"] in kinds.names(), f"{where}.kind", f"one of {', '.join(kinds.names())}", entry["kind"])
    need(entry["name"] in tensors, f"{where}.name", "a tensor of the shard", entry["name"])
    for name, low in (("batch", 0), ("call", 0), ("order", -1)):
        need(name in entry, f"{where}.{name}", "present", "nothing")
        whole(entry[name], f"{where}.{name}", low)
    need(entry["batch"] in batches, f"{where}.batch", "a batch the shard lists", entry["batch"])
    for name in ("layout", "placement"):
        need(isinstance(entry.get(name, ""), str), f"{where}.{name}", "text", entry.get(name))
    need(not set(entry) - ENTRY_FIELDS, where, f"an entry of {', '.join(sorted(ENTRY_FIELDS))}", sorted(entry))


def _check_label(label: object, where: str, tensors: Mapping[str, Any]) -> None:
    label = an_object(label, where)
    keys = ("site", "kind", "key", "prefix", "channel_dim", "shape", "dtype")
    need(sorted(label) == sorted(keys), where, f"an object of {', '.join(keys)}", sorted(label))
    for name in ("site", "kind", "key", "prefix"):
        text(label.get(name), f"{where}.{name}")
    need(label["kind"] in kinds.names(), f"{where}.kind", f"one of {', '.join(kinds.names())}", label["kind"])
    need(label.get("channel_dim") is None or is_int(label["channel_dim"]), f"{where}.channel_dim",
          "an integer or null", label.get("channel_dim"))  # fmt: skip
    wholes(label.get("shape", []), f"{where}.shape")
    need(label.get("dtype") is None or isinstance(label["dtype"], str), f"{where}.dtype", "text or null",
          label.get("dtype"))  # fmt: skip
    held = {n.removeprefix(label["prefix"] + ".") for n in tensors if n.startswith(label["prefix"] + ".")}
    needed = {"counts", "hist", "updates", *(f"all.{f.name}" for f in fields(Moments))}
    if any(n.startswith("channels.") for n in held):
        needed |= {f"channels.{f.name}" for f in fields(Moments)}
    need(needed <= held, f"{where}.prefix", f"the prefix of tensors {', '.join(sorted(needed))}", sorted(held))
