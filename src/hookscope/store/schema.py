"""What a store's files may hold, checked before anything is used: the manifest and each shard's header.

Reading a store trusts nothing it reads. Every field of ``manifest.json`` and of a shard's
safetensors header (and the ``"hookscope"`` metadata in it) is checked here, in pure functions,
before any other code looks at it: its type, its range, that a tensor's dtype and shape fit the
bytes its offsets give and that those lie inside the file, that every name a row gives (a site,
a shard, a layout) exists, and how deeply anything is nested. What fails is a ``StoreError`` (a
``DamagedShardError`` for a shard) naming the file and the field, e.g. ``shard
shards/r0-…-000003.safetensors is damaged: tensors[2].batch is missing``; never a ``KeyError``.

A shard's index is also vouched for: ``write_shard`` puts the CRC-32 of its tensors' names,
dtypes and shapes and of its metadata under ``"index_crc32"`` (``index_checksum``), next to the
CRC-32 of each tensor's bytes (``"crc32"``); a header edited afterwards fails it. Shards written
before that field existed are read as before, their fields checked but not vouched for.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import PurePosixPath
from typing import Any

from ..core import kinds
from ..errors import DamagedShardError, StoreError
from ..stats.moments import Moments

MAX_DEPTH = 64  # nesting of a free-form part (provenance, config, a site): deeper is damage, not data
MAX_LAYOUT_DEPTH = 48  # containers inside containers in a layout (a capture stops at 32)
MAX_DIMS = 64  # dimensions of a stored tensor
COLUMNS = ("site", "kind", "key", "batch", "call", "order", "shard", "name", "dtype", "shape", "offsets",
           "layout", "crc32")  # fmt: skip
FIRST_COLUMNS = 11  # stores written before ``layout`` and ``crc32`` have these only
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
            "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "uint16": 2, "uint32": 4,
            "uint64": 8}  # fmt: skip
SAFETENSORS = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
               "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn",
               "F8_E5M2": "float8_e5m2", "U16": "uint16", "U32": "uint32", "U64": "uint64"}  # fmt: skip
STATUSES = ("running", "complete")


class _Wrong(Exception):
    """A field that is not what the format says; the message names it and what it must be."""


# -- the manifest -----------------------------------------------------------------------------------
def check_manifest(manifest: object, file: str, version: int) -> dict[str, Any]:
    """``manifest`` itself when everything but its index (``check_index``) is as the format says."""
    try:
        top = _dict(manifest, "the manifest")
        if top.get("format") != "hookscope.store":
            raise StoreError(f"{file} is not a hookscope store manifest (its format is {_show(top.get('format'))}); "
                             "open a folder written by hookscope.save, extract or watch")  # fmt: skip
        _int(top.setdefault("version", 1), "version", 1)
        if top["version"] > version:
            raise StoreError(f"{file} was written by a newer hookscope (store version {top['version']}, this one "
                             f"reads {version}); upgrade hookscope")  # fmt: skip
        _need(top.get("status") in STATUSES, "status", " or ".join(map(repr, STATUSES)), top.get("status"))
        for part in ("provenance", "config"):
            _shallow(_dict(top.get(part, {}), part), part)
        _check_provenance(top.get("provenance", {}))
        _check_config(top.get("config", {}))
        names = _check_sites(top.get("sites", []))
        _each(top.get("calls", []), "calls", lambda call, where: _check_call(call, where, names))
        _check_extras(top)
    except _Wrong as wrong:
        raise StoreError(f"{file} is damaged: {wrong}; it cannot be read (a store is written whole: "
                         "write it again, or restore it)") from None  # fmt: skip
    return top


def check_index(manifest: Mapping[str, Any], file: str) -> dict[str, str]:
    """Check a complete store's index (batches, shards, tensors, layouts) in place; return the shards
    (file -> why) that a bad row names: they are left out, the row dropped. Anything else is a ``StoreError``."""
    try:
        shards = _each(manifest.get("shards", []), "shards", _check_shard_entry)
        listed = [b["index"] for b in _each(manifest.get("batches", []), "batches", _check_batch)]
        _need(len(set(listed)) == len(listed), "batches", "a list of distinct batches", listed)
        layouts = _dict(manifest.get("layouts", {}), "layouts")
        for name, layout in layouts.items():
            check_layout(layout, f"layouts[{name!r}]")
        columns = _strs(manifest.get("tensor_columns", list(COLUMNS)), "tensor_columns")
        _need(FIRST_COLUMNS <= len(columns) <= len(COLUMNS) and tuple(columns) == COLUMNS[: len(columns)],
              "tensor_columns", f"the first {FIRST_COLUMNS} or more of {', '.join(COLUMNS)}", columns)  # fmt: skip
        rows = _list(manifest.get("tensors", []), "tensors")
    except _Wrong as wrong:
        raise StoreError(f"{file} is damaged: {wrong}; it cannot be read (a store is written whole: "
                         "write it again, or restore it)") from None  # fmt: skip
    sites = {s["name"] for s in manifest.get("sites", [])}
    batches = set(listed)
    known, data = frozenset(kinds.names()), [s["bytes"] - s["data_start"] for s in shards]
    damaged: dict[str, str] = {}
    kept = []
    for i, row in enumerate(rows):
        if _row_fits(row, len(columns), data, layouts, sites, batches, known):
            kept.append(row)
            continue
        problem = _row_problem(row, len(columns), shards, layouts, sites, batches)
        if problem is None:
            kept.append(row)
            continue
        number = row[6] if isinstance(row, list) and len(row) > 6 else None
        if not (isinstance(number, int) and _is_int(number) and 0 <= number < len(shards)):
            raise StoreError(f"{file} is damaged: tensors[{i}] {problem}; it cannot be read")
        damaged.setdefault(shards[number]["file"], f"the manifest's row tensors[{i}] {problem}")
    rows[:] = kept
    return damaged


def _row_fits(row: object, width: int, data: list[int], layouts: Mapping[str, Any], sites: set[str],
              batches: set[int], known: frozenset[str]) -> bool:  # fmt: skip
    """``check_row``'s checks, quickly (a million rows): True when all hold; ``_row_problem`` says which fails."""
    if type(row) is not list or len(row) != width:
        return False
    site, kind, key, batch, call, order, shard, name, dtype, shape, offsets = row[:FIRST_COLUMNS]
    if not (type(site) is str and site in sites and type(kind) is str and kind in known and type(key) is str
            and type(name) is str and type(batch) is int and batch in batches and type(call) is int and call >= 0
            and type(order) is int and order >= -1 and type(shard) is int and 0 <= shard < len(data)
            and type(dtype) is str and dtype in ITEMSIZE and type(shape) is list and len(shape) <= MAX_DIMS
            and type(offsets) is list and len(offsets) == 2):  # fmt: skip
        return False
    begin, end = offsets
    if not (all(type(n) is int and n >= 0 for n in shape) and type(begin) is int and type(end) is int):
        return False
    if not (0 <= begin <= end <= data[shard] and end - begin == math.prod(shape) * ITEMSIZE[dtype]):
        return False
    layout = row[11] if width > FIRST_COLUMNS else ""
    crc = row[12] if width > FIRST_COLUMNS + 1 else -1
    return type(layout) is str and (layout == "" or layout in layouts) and type(crc) is int and -1 <= crc <= 0xFFFFFFFF


def _row_problem(row: object, width: int, shards: list[dict[str, Any]], layouts: Mapping[str, Any],
                 sites: set[str], batches: set[int]) -> str | None:  # fmt: skip
    """What is wrong with a row of the ``tensors`` table (``check_row``), or None."""
    try:
        check_row(row, width, shards, layouts, sites)
        _need(row[3] in batches, "(batch)", "a batch the manifest lists", row[3])  # type: ignore[index]
    except _Wrong as wrong:
        return str(wrong)
    return None


def check_row(row: object, width: int, shards: list[dict[str, Any]], layouts: Mapping[str, Any],
              sites: set[str]) -> list[Any]:  # fmt: skip
    """One row of the ``tensors`` table, its shard's bytes and the names it gives included."""
    _need(isinstance(row, list) and len(row) == width, "", f"a list of {width} columns", row)
    assert isinstance(row, list)
    site, kind, key, batch, call, order, shard, name, dtype, shape, offsets = row[:FIRST_COLUMNS]
    _need(isinstance(site, str) and site in sites, "(site)", "a site the manifest lists", site)
    _need(isinstance(kind, str) and kind in kinds.names(), "(kind)", f"one of {', '.join(kinds.names())}", kind)
    _str(key, "(key)")
    _str(name, "(name)")
    for value, column in ((batch, "batch"), (call, "call"), (order + 1 if _is_int(order) else order, "order + 1")):
        _int(value, f"({column})")
    _int(shard, "(shard)", 0, len(shards) - 1)
    _fits(dtype, shape, offsets, shards[shard]["bytes"] - shards[shard]["data_start"], "")
    if width > FIRST_COLUMNS:
        _need(row[11] == "" or (isinstance(row[11], str) and row[11] in layouts), "(layout)",
              "'' or a layout the manifest holds", row[11])  # fmt: skip
    if width > FIRST_COLUMNS + 1:
        _int(row[12], "(crc32)", -1, 0xFFFFFFFF)
    return row


def _check_provenance(prov: Mapping[str, Any]) -> None:
    for name in ("hookscope", "torch", "python", "created", "model", "model_module", "weights_sha256"):
        _need(prov.get(name) is None or isinstance(prov[name], str), f"provenance.{name}", "text", prov.get(name))
    if "parameters" in prov:
        _int(prov["parameters"], "provenance.parameters")


def _check_config(config: Mapping[str, Any]) -> None:
    _need(config.get("source") is None or isinstance(config["source"], str), "config.source", "text",
          config.get("source"))  # fmt: skip
    _strs(config.get("kinds", []), "config.kinds")
    _need(config.get("reduce") is None or isinstance(config["reduce"], str), "config.reduce", "text or null",
          config.get("reduce"))  # fmt: skip
    for name, low in (("world_size", 1), ("every", 1), ("steps", 0)):
        if config.get(name) is not None:
            _int(config[name], f"config.{name}", low)


def _check_sites(sites: object) -> set[str]:
    names: set[str] = set()
    for i, site in enumerate(_list(sites, "sites")):
        where = f"sites[{i}]"
        site = _dict(site, where)
        _shallow(site, where)
        name = _str(site.get("name"), f"{where}.name")
        _need(name not in names, f"{where}.name", "a name no other site has", name)
        names.add(name)
        _str(site.get("type"), f"{where}.type")
        _strs(site.get("kinds"), f"{where}.kinds")
        _strs(site.get("params", []), f"{where}.params")
        _str_map(site.get("missing", {}), f"{where}.missing")
        _need(site.get("channels") is None or _is_int(site["channels"]), f"{where}.channels", "an integer or null",
              site.get("channels"))  # fmt: skip
    return names


def _check_call(call: object, where: str, sites: set[str]) -> None:
    call = _dict(call, where)
    _need(call.get("site") in sites, f"{where}.site", "a site the manifest lists", call.get("site"))
    _int(call.get("batch"), f"{where}.batch")
    _int(call.get("call"), f"{where}.call")
    _int(call.get("order", 0), f"{where}.order", -1)
    _str_map(call.get("missing", {}), f"{where}.missing")
    _need(call.get("error") is None or isinstance(call["error"], str), f"{where}.error", "text or null",
          call.get("error"))  # fmt: skip
    for kind, keys in _dict(call.get("watched", {}), f"{where}.watched").items():
        _strs(keys, f"{where}.watched[{kind!r}]")


def _check_extras(top: Mapping[str, Any]) -> None:
    """``damaged``, ``stats``, ``series`` and ``alerts``: the parts some stores have."""
    _str_map(top.get("damaged", {}), "damaged")
    stats = _dict(top.get("stats", {}), "stats")
    if stats:
        files = stats["parts"] if "parts" in stats else [stats.get("file")]
        for i, part in enumerate(_list(files, "stats.parts")):
            relative(part, f"stats.parts[{i}]" if "parts" in stats else "stats.file")
    series = _dict(top.get("series", {}), "series")
    if series:
        relative(series.get("file"), "series.file")
    _each(top.get("alerts", []), "alerts", _check_alert)


def _check_alert(alert: object, where: str) -> None:
    alert = _dict(alert, where)
    fields = ("step", "module", "kind", "column", "value", "bound", "message")
    _need(sorted(alert) == sorted(fields), where, f"an object of {', '.join(fields)}", sorted(alert))
    _int(alert["step"], f"{where}.step")
    for name in ("module", "kind", "column", "message"):
        _str(alert[name], f"{where}.{name}")
    for name in ("value", "bound"):
        _need(_is_number(alert[name]), f"{where}.{name}", "a number or 'nan', 'inf', '-inf'", alert[name])


def _check_shard_entry(shard: object, where: str) -> dict[str, Any]:
    shard = _dict(shard, where)
    relative(shard.get("file"), f"{where}.file")
    size = _int(shard.get("bytes"), f"{where}.bytes")
    _int(shard.get("data_start"), f"{where}.data_start", 8, max(size, 8))
    return shard


def _check_batch(batch: object, where: str) -> dict[str, Any]:
    batch = _dict(batch, where)
    _int(batch.get("index"), f"{where}.index")
    _need(batch.get("rows") is None or (_is_int(batch["rows"]) and batch["rows"] >= 0), f"{where}.rows",
          "an integer >= 0 or null", batch.get("rows"))  # fmt: skip
    if "rank" in batch:
        _int(batch["rank"], f"{where}.rank")
    return batch


def check_layout(data: object, where: str, depth: int = 0) -> None:
    """A layout's JSON (``hookscope.core.layout``): known forms only, nested at most ``MAX_LAYOUT_DEPTH``."""
    _need(depth <= MAX_LAYOUT_DEPTH, where, f"nested at most {MAX_LAYOUT_DEPTH} deep", "deeper")
    data = _dict(data, where)
    if "n" in data:
        _str(data["n"], f"{where}.n")
        _need(data.get("c") is None or isinstance(data["c"], str), f"{where}.c", "text", data.get("c"))
        for i, name in enumerate(_list(data.get("k", []), f"{where}.k")):
            _check_value(name, f"{where}.k[{i}]", depth + 1)
        for i, child in enumerate(_list(data.get("i", []), f"{where}.i")):
            check_layout(child, f"{where}.i[{i}]", depth + 1)
    elif "t" in data or "not_kept" in data:
        for name in ("t", "not_kept", "why"):
            _need(data.get(name) is None or isinstance(data[name], str), f"{where}.{name}", "text", data.get(name))
    else:
        _check_value(data, where, depth)


def _check_value(data: object, where: str, depth: int) -> None:
    """A plain value's JSON: ``{"v": ...}`` or one of its typed forms, each with the type it needs."""
    _need(depth <= MAX_LAYOUT_DEPTH, where, f"nested at most {MAX_LAYOUT_DEPTH} deep", "deeper")
    data = _dict(data, where)
    _need(len(data) == 1, where, "an object of one field", sorted(data))
    ((form, value),) = data.items()
    checks: dict[str, Callable[[object], bool]] = {
        "v": lambda v: v is None or isinstance(v, (bool, int, str)) or (isinstance(v, float) and math.isfinite(v)),
        "float": lambda v: _is_number(v),
        "dtype": lambda v: isinstance(v, str),
        "device": lambda v: isinstance(v, str) and _is_device(v),
        "size": lambda v: isinstance(v, list) and all(_is_int(n) and n >= 0 for n in v),
        "complex": lambda v: isinstance(v, list) and len(v) == 2 and all(_is_number(n) for n in v),
        "bytes": lambda v: isinstance(v, str) and _is_hex(v),
        "ellipsis": lambda v: v is True,
        "tuple": lambda v: isinstance(v, list),
        "repr": lambda v: isinstance(v, str),
    }
    _need(form in checks and checks[form](value), f"{where}.{form}", "a value of its form", value)
    if form == "tuple":
        for i, item in enumerate(value):
            _check_value(item, f"{where}.tuple[{i}]", depth + 1)


# -- a shard's header -------------------------------------------------------------------------------
def check_shard(raw: bytes, size: int, file: str) -> dict[str, Any]:
    """A shard's header (the JSON after its 8-byte length) as ``read_index`` returns it:
    ``{"bytes", "data_start", "meta", "tensors": {name: (dtype, shape, [begin, end])}}``."""
    try:
        header = _dict(loads(raw, "the header"), "the header")
        metadata = _str_map(header.pop("__metadata__", {}), "__metadata__")
        meta = _dict(loads(metadata.get("hookscope", "{}"), "__metadata__.hookscope"), "__metadata__.hookscope")
        data = size - 8 - len(raw)
        tensors = {name: _header_entry(info, name, data) for name, info in header.items()}
        _check_meta(meta, tensors)
    except _Wrong as wrong:
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
    info = _dict(info, where)
    code = info.get("dtype")
    _need(isinstance(code, str) and code in SAFETENSORS, f"{where}.dtype", "a dtype hookscope reads", code)
    dtype = SAFETENSORS[str(code)]
    shape, offsets = info.get("shape"), info.get("data_offsets")
    _fits(dtype, shape, offsets, data, f"{where} ")
    return dtype, list(shape), list(offsets)  # type: ignore[arg-type]  # _fits checked both


def _check_meta(meta: Mapping[str, Any], tensors: Mapping[str, Any]) -> None:
    """The ``"hookscope"`` metadata: rank, batches, tensors (each naming a tensor of the shard), layouts, checksums."""
    if "rank" in meta:
        _int(meta["rank"], "rank")
    listed = [b["index"] for b in _each(meta.get("batches", []), "batches", _check_batch)]
    _need(len(set(listed)) == len(listed), "batches", "a list of distinct batches", listed)
    batches, known = set(listed), frozenset(kinds.names())
    for i, entry in enumerate(_list(meta.get("tensors", []), "tensors")):
        if not _entry_fits(entry, tensors, batches, known):
            _check_entry(entry, f"tensors[{i}]", tensors, batches)
    for name, layout in _dict(meta.get("layouts", {}), "layouts").items():
        check_layout(layout, f"layouts[{name!r}]")
    for name, value in _dict(meta.get("crc32", {}), "crc32").items():
        _int(value, f"crc32[{name!r}]", 0, 0xFFFFFFFF)
    if "index_crc32" in meta:
        _int(meta["index_crc32"], "index_crc32", 0, 0xFFFFFFFF)
    _each(meta.get("labels", []), "labels", lambda label, where: _check_label(label, where, tensors))
    _strs(meta.get("columns", []), "columns")


ENTRY_FIELDS = frozenset({"site", "kind", "key", "name", "batch", "call", "order", "layout"})


def _entry_fits(entry: object, tensors: Mapping[str, Any], batches: set[int], known: frozenset[str]) -> bool:
    """``_check_entry``'s checks, quickly: True when all hold."""
    if type(entry) is not dict or not entry.keys() <= ENTRY_FIELDS:
        return False
    site, kind, key, name = entry.get("site"), entry.get("kind"), entry.get("key"), entry.get("name")
    batch, call, order = entry.get("batch"), entry.get("call"), entry.get("order")
    return (type(site) is str and type(kind) is str and kind in known and type(key) is str and type(name) is str
            and name in tensors and type(batch) is int and batch in batches and type(call) is int and call >= 0
            and type(order) is int and order >= -1 and type(entry.get("layout", "")) is str)  # fmt: skip


def _check_entry(entry: object, where: str, tensors: Mapping[str, Any], batches: set[int]) -> None:
    entry = _dict(entry, where)
    for name in ("site", "kind", "key", "name"):
        _need(name in entry, f"{where}.{name}", "present", "nothing")
        _str(entry[name], f"{where}.{name}")
    _need(entry["kind"] in kinds.names(), f"{where}.kind", f"one of {', '.join(kinds.names())}", entry["kind"])
    _need(entry["name"] in tensors, f"{where}.name", "a tensor of the shard", entry["name"])
    for name, low in (("batch", 0), ("call", 0), ("order", -1)):
        _need(name in entry, f"{where}.{name}", "present", "nothing")
        _int(entry[name], f"{where}.{name}", low)
    _need(entry["batch"] in batches, f"{where}.batch", "a batch the shard lists", entry["batch"])
    _need(isinstance(entry.get("layout", ""), str), f"{where}.layout", "text", entry.get("layout"))
    _need(not set(entry) - {"site", "kind", "key", "name", "batch", "call", "order", "layout"}, where,
          "an entry of site, kind, key, name, batch, call, order, layout", sorted(entry))  # fmt: skip


def _check_label(label: object, where: str, tensors: Mapping[str, Any]) -> None:
    label = _dict(label, where)
    for name in ("site", "kind", "key", "prefix"):
        _str(label.get(name), f"{where}.{name}")
    _need(label.get("channel_dim") is None or _is_int(label["channel_dim"]), f"{where}.channel_dim",
          "an integer or null", label.get("channel_dim"))  # fmt: skip
    _ints(label.get("shape", []), f"{where}.shape")
    _need(label.get("dtype") is None or isinstance(label["dtype"], str), f"{where}.dtype", "text or null",
          label.get("dtype"))  # fmt: skip
    held = {n.removeprefix(label["prefix"] + ".") for n in tensors if n.startswith(label["prefix"] + ".")}
    needed = {"counts", "hist", "updates", *(f"all.{f.name}" for f in fields(Moments))}
    if any(n.startswith("channels.") for n in held):
        needed |= {f"channels.{f.name}" for f in fields(Moments)}
    _need(needed <= held, f"{where}.prefix", f"the prefix of tensors {', '.join(sorted(needed))}", sorted(held))


# -- names and pieces -----------------------------------------------------------------------------------
def relative(name: object, where: str) -> str:
    """A file name inside the store: relative, POSIX, no ``..``."""
    _need(isinstance(name, str) and name != "", where, "a file name inside the store", name)
    path = PurePosixPath(str(name))
    _need(not path.is_absolute() and ".." not in path.parts and "\\" not in str(name) and "\x00" not in str(name),
          where, "a name inside the store (relative, no '..'), not one outside the store", name)  # fmt: skip
    return str(name)


def loads(text: str | bytes, where: str) -> Any:
    """JSON, with a damaged text (not JSON, nested past Python's recursion limit) as a ``_Wrong``."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise _Wrong(f"{where} is not JSON ({' '.join(str(err).split())[:80]})") from None


def _fits(dtype: object, shape: object, offsets: object, data: int, where: str) -> None:
    """``shape`` of ``dtype`` is exactly the bytes ``offsets`` give, and they lie in the ``data`` bytes."""
    _need(isinstance(dtype, str) and dtype in ITEMSIZE, f"{where}(dtype)", "a dtype hookscope reads", dtype)
    dims = _ints(shape, f"{where}(shape)")
    _need(len(dims) <= MAX_DIMS, f"{where}(shape)", f"at most {MAX_DIMS} dimensions", len(dims))
    span = _ints(offsets, f"{where}(offsets)")
    _need(len(span) == 2 and span[0] <= span[1] <= data, f"{where}(offsets)",
          f"[begin, end] with begin <= end <= {data} (the shard's data bytes)", offsets)  # fmt: skip
    needed = math.prod(dims) * ITEMSIZE[str(dtype)]
    _need(span[1] - span[0] == needed, f"{where}(offsets)", f"{needed} bytes apart for shape {dims} {dtype}", span)


def _each(items: object, where: str, check: Callable[[Any, str], Any]) -> list[Any]:
    return [check(item, f"{where}[{i}]") for i, item in enumerate(_list(items, where))]


def _shallow(value: object, where: str) -> None:
    """Refuse nesting past ``MAX_DEPTH`` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        _need(depth <= MAX_DEPTH, where, f"nested at most {MAX_DEPTH} deep", "deeper")
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children)


def _need(ok: bool, field: str, expected: str, got: object) -> None:
    if not ok:
        raise _Wrong(f"{field} must be {expected}, got {_show(got)}".strip())


def _show(value: object) -> str:
    text = "nothing" if value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value: object) -> bool:
    return type(value) is int  # not a bool (nor an int subclass, which JSON never gives)


def _is_number(value: object) -> bool:
    if isinstance(value, str):
        return value in ("nan", "inf", "-inf")
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_hex(text: str) -> bool:
    return len(text) % 2 == 0 and all(c in "0123456789abcdefABCDEF" for c in text)


def _is_device(text: str) -> bool:
    kind, _, number = text.partition(":")
    return kind.isidentifier() and (not number or number.isdigit())


def _int(value: object, where: str, low: int = 0, high: int | None = None) -> int:
    bound = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
    _need(_is_int(value) and low <= value and (high is None or value <= high), where, bound, value)  # type: ignore[operator]
    return value  # type: ignore[return-value]


def _ints(value: object, where: str) -> list[int]:
    _need(type(value) is list and all(type(v) is int and v >= 0 for v in value), where,
          "a list of integers >= 0", value)  # fmt: skip
    return value  # type: ignore[return-value]


def _str(value: object, where: str) -> str:
    _need(isinstance(value, str), where, "text", value)
    return value  # type: ignore[return-value]


def _strs(value: object, where: str) -> list[str]:
    _need(isinstance(value, list) and all(isinstance(v, str) for v in value), where, "a list of text", value)
    return value  # type: ignore[return-value]


def _str_map(value: object, where: str) -> dict[str, str]:
    _need(isinstance(value, dict) and all(isinstance(v, str) for v in value.values()), where,
          "an object of text values", value)  # fmt: skip
    return value  # type: ignore[return-value]


def _list(value: object, where: str) -> list[Any]:
    _need(isinstance(value, list), where, "a list", value)
    return value  # type: ignore[return-value]


def _dict(value: object, where: str) -> dict[str, Any]:
    _need(isinstance(value, dict), where, "an object", value)
    return value  # type: ignore[return-value]
