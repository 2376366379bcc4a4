"""What a store's manifest may hold, checked before anything is used (a shard's header: ``store.header``).

Reading a store trusts nothing it reads. Every field of ``manifest.json`` is checked here, and
every field of a shard's header in ``hookscope.store.header``, in pure functions (built from
``hookscope.store.fields``), before any other code looks at it: its type, its range, that a
tensor's dtype and shape fit the bytes its offsets give and that those lie inside the file, that
every name a row gives (a site, a batch, a shard, a layout) exists, and how deeply anything is
nested. What fails is a ``StoreError`` (a ``DamagedShardError`` for a shard) naming the file and
the field, e.g. ``shard shards/r0-…-000003.safetensors is damaged: tensors[2].batch must be
present, got nothing``; never a ``KeyError``.

``check_manifest`` checks everything but the index (``read_manifest`` calls it); ``check_index``
checks a complete store's index in place, a bad row costing only the shard it names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..core import kinds
from ..errors import StoreError
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
    is_number,
    need,
    relative,
    shallow,
    show,
    text,
    text_map,
    texts,
    whole,
    wholes,
)

COLUMNS = ("site", "kind", "key", "batch", "call", "order", "shard", "name", "dtype", "shape", "offsets",
           "layout", "crc32")  # fmt: skip

FIRST_COLUMNS = 11  # stores written before ``layout`` and ``crc32`` have these only

STATUSES = ("running", "complete")

# a watch store's ``non_finite``: the ``NonFiniteError`` (nan_guard) that ended its run, field by field
NON_FINITE = ("step", "phase", "module", "call", "kind", "key", "value", "count", "numel", "input_absmax", "rank",
              "message")  # fmt: skip


def check_manifest(manifest: object, file: str, version: int) -> dict[str, Any]:
    """``manifest`` itself when everything but its index (``check_index``) is as the format says."""
    try:
        top = an_object(manifest, "the manifest")
        if top.get("format") != "hookscope.store":
            raise StoreError(f"{file} is not a hookscope store manifest (its format is {show(top.get('format'))}); "
                             "open a folder written by hookscope.save, extract or watch")  # fmt: skip
        whole(top.setdefault("version", 1), "version", 1)
        if top["version"] > version:
            raise StoreError(f"{file} was written by a newer hookscope (store version {top['version']}, this one "
                             f"reads {version}); upgrade hookscope")  # fmt: skip
        need(top.get("status") in STATUSES, "status", " or ".join(map(repr, STATUSES)), top.get("status"))
        for part in ("provenance", "config"):
            shallow(an_object(top.get(part, {}), part), part)
        _check_provenance(top.get("provenance", {}))
        _check_config(top.get("config", {}))
        names = _check_sites(top.get("sites", []))
        each(top.get("calls", []), "calls", lambda call, where: _check_call(call, where, names))
        _check_extras(top)
    except Wrong as wrong:
        raise StoreError(f"{file} is damaged: {wrong}; it cannot be read (a store is written whole: "
                         "write it again, or restore it)") from None  # fmt: skip
    return top


def check_index(manifest: Mapping[str, Any], file: str) -> dict[str, str]:
    """Check a complete store's index (batches, shards, tensors, layouts) in place; return the shards
    (file -> why) that a bad row names: they are left out, the row dropped. Anything else is a ``StoreError``."""
    try:
        shards = each(manifest.get("shards", []), "shards", _check_shard_entry)
        listed = [b["index"] for b in each(manifest.get("batches", []), "batches", check_batch)]
        need(len(set(listed)) == len(listed), "batches", "a list of distinct batches", listed)
        layouts = an_object(manifest.get("layouts", {}), "layouts")
        for name, layout in layouts.items():
            check_layout(layout, f"layouts[{name!r}]")
        columns = texts(manifest.get("tensor_columns", list(COLUMNS)), "tensor_columns")
        need(FIRST_COLUMNS <= len(columns) <= len(COLUMNS) and tuple(columns) == COLUMNS[: len(columns)],
              "tensor_columns", f"the first {FIRST_COLUMNS} or more of {', '.join(COLUMNS)}", columns)  # fmt: skip
        rows = a_list(manifest.get("tensors", []), "tensors")
    except Wrong as wrong:
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
        if not (isinstance(number, int) and is_int(number) and 0 <= number < len(shards)):
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
        need(row[3] in batches, "(batch)", "a batch the manifest lists", row[3])  # type: ignore[index]
    except Wrong as wrong:
        return str(wrong)
    return None


def check_row(row: object, width: int, shards: list[dict[str, Any]], layouts: Mapping[str, Any],
              sites: set[str]) -> list[Any]:  # fmt: skip
    """One row of the ``tensors`` table, its shard's bytes and the names it gives included."""
    need(isinstance(row, list) and len(row) == width, "", f"a list of {width} columns", row)
    assert isinstance(row, list)
    site, kind, key, batch, call, order, shard, name, dtype, shape, offsets = row[:FIRST_COLUMNS]
    need(isinstance(site, str) and site in sites, "(site)", "a site the manifest lists", site)
    need(isinstance(kind, str) and kind in kinds.names(), "(kind)", f"one of {', '.join(kinds.names())}", kind)
    text(key, "(key)")
    text(name, "(name)")
    for value, column in ((batch, "batch"), (call, "call"), (order + 1 if is_int(order) else order, "order + 1")):
        whole(value, f"({column})")
    whole(shard, "(shard)", 0, len(shards) - 1)
    fits(dtype, shape, offsets, shards[shard]["bytes"] - shards[shard]["data_start"], "")
    if width > FIRST_COLUMNS:
        need(row[11] == "" or (isinstance(row[11], str) and row[11] in layouts), "(layout)",
              "'' or a layout the manifest holds", row[11])  # fmt: skip
    if width > FIRST_COLUMNS + 1:
        whole(row[12], "(crc32)", -1, 0xFFFFFFFF)
    return row


def _check_provenance(prov: Mapping[str, Any]) -> None:
    for name in ("hookscope", "torch", "python", "created", "model", "model_module", "weights_sha256"):
        need(prov.get(name) is None or isinstance(prov[name], str), f"provenance.{name}", "text", prov.get(name))
    if "parameters" in prov:
        whole(prov["parameters"], "provenance.parameters")


def _check_config(config: Mapping[str, Any]) -> None:
    need(config.get("source") is None or isinstance(config["source"], str), "config.source", "text",
          config.get("source"))  # fmt: skip
    texts(config.get("kinds", []), "config.kinds")
    need(config.get("reduce") is None or isinstance(config["reduce"], str), "config.reduce", "text or null",
          config.get("reduce"))  # fmt: skip
    for name in ("target", "loss"):  # extract's target: "loss" in stores made before it was "target"
        need(config.get(name) is None or isinstance(config[name], str), f"config.{name}", "text or null",
             config.get(name))  # fmt: skip
    for name, low in (("world_size", 1), ("every", 1), ("steps", 0)):
        if config.get(name) is not None:
            whole(config[name], f"config.{name}", low)


def with_target(config: Mapping[str, Any]) -> dict[str, Any]:
    """A store's config with extract's target under ``"target"``; a store made before it was
    renamed wrote it as ``"loss"`` (read as ``"target"``; the old key is kept for old readers of it)."""
    out = dict(config)
    if "loss" in out and "target" not in out:
        out["target"] = out["loss"]
    return out


def _check_sites(sites: object) -> set[str]:
    names: set[str] = set()
    for i, site in enumerate(a_list(sites, "sites")):
        where = f"sites[{i}]"
        site = an_object(site, where)
        shallow(site, where)
        name = text(site.get("name"), f"{where}.name")
        need(name not in names, f"{where}.name", "a name no other site has", name)
        names.add(name)
        text(site.get("type"), f"{where}.type")
        texts(site.get("kinds"), f"{where}.kinds")
        texts(site.get("params", []), f"{where}.params")
        text_map(site.get("missing", {}), f"{where}.missing")
        need(site.get("channels") is None or is_int(site["channels"]), f"{where}.channels", "an integer or null",
              site.get("channels"))  # fmt: skip
    return names


def _check_call(call: object, where: str, sites: set[str]) -> None:
    call = an_object(call, where)
    need(call.get("site") in sites, f"{where}.site", "a site the manifest lists", call.get("site"))
    whole(call.get("batch"), f"{where}.batch")
    whole(call.get("call"), f"{where}.call")
    whole(call.get("order", 0), f"{where}.order", -1)
    text_map(call.get("missing", {}), f"{where}.missing")
    need(call.get("error") is None or isinstance(call["error"], str), f"{where}.error", "text or null",
          call.get("error"))  # fmt: skip
    for kind, keys in an_object(call.get("watched", {}), f"{where}.watched").items():
        texts(keys, f"{where}.watched[{kind!r}]")


def _check_extras(top: Mapping[str, Any]) -> None:
    """``damaged``, ``stats``, ``series`` and ``alerts``: the parts some stores have."""
    text_map(top.get("damaged", {}), "damaged")
    stats = an_object(top.get("stats", {}), "stats")
    if stats:
        files = stats["parts"] if "parts" in stats else [stats.get("file")]
        for i, part in enumerate(a_list(files, "stats.parts")):
            relative(part, f"stats.parts[{i}]" if "parts" in stats else "stats.file")
    series = an_object(top.get("series", {}), "series")
    if series:
        relative(series.get("file"), "series.file")
        for site, cells in an_object(series.get("undefined", {}), "series.undefined").items():
            for column, steps in an_object(cells, f"series.undefined[{site!r}]").items():
                wholes(steps, f"series.undefined[{site!r}][{column!r}]")
    each(top.get("alerts", []), "alerts", _check_alert)
    if "non_finite" in top:
        _check_non_finite(top["non_finite"], "non_finite")


def _check_alert(alert: object, where: str) -> None:
    alert = an_object(alert, where)
    fields = ("step", "module", "kind", "column", "value", "bound", "message")
    need(sorted(alert) == sorted(fields), where, f"an object of {', '.join(fields)}", sorted(alert))
    whole(alert["step"], f"{where}.step")
    for name in ("module", "kind", "column", "message"):
        text(alert[name], f"{where}.{name}")
    for name in ("value", "bound"):
        need(is_number(alert[name]), f"{where}.{name}", "a number or 'nan', 'inf', '-inf'", alert[name])


def _check_non_finite(row: object, where: str) -> None:
    row = an_object(row, where)
    need(sorted(row) == sorted(NON_FINITE), where, f"an object of {', '.join(NON_FINITE)}", sorted(row))
    whole(row["step"], f"{where}.step")
    for name in ("phase", "module", "kind", "key", "value", "message"):
        text(row[name], f"{where}.{name}")
    for name in ("call", "count", "numel", "rank"):
        if row[name] is not None:
            whole(row[name], f"{where}.{name}")
    absmax = row["input_absmax"]
    need(absmax is None or is_number(absmax), f"{where}.input_absmax", "a number or null", absmax)


def _check_shard_entry(shard: object, where: str) -> dict[str, Any]:
    shard = an_object(shard, where)
    relative(shard.get("file"), f"{where}.file")
    size = whole(shard.get("bytes"), f"{where}.bytes")
    whole(shard.get("data_start"), f"{where}.data_start", 8, max(size, 8))
    return shard
