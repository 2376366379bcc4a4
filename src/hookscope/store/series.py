"""A training run's time series on disk: the watch store, written and read back.

``hookscope.watch`` writes a store of the usual format (``hookscope.store.format``: a folder
whose ``manifest.json`` is written atomically) that holds no batches of tensors but one table per
site, a row per logged step (the rows: ``hookscope.store.history``)::

    exp.hookscope/
      manifest.json        config.source "watch", sites, "series" and "alerts" (one line per alert)
      series.safetensors   one float64 tensor (steps, len(COLUMNS)) per site, named by the site
      scalars.safetensors  one float64 tensor (n, 2) of (step, value) per scalar of ``w.log`` (loss, lr...),
                           named by the scalar; manifest "scalars" names it (a store without it has none)

``write_watch`` writes both, each whole or not at all (``write_atomically``, with the shard's
CRC-32s); ``read_histories`` and ``read_alerts`` read them back for ``hookscope.load``'s ``Run``
(``run.history(name)``, ``run.alerts``); ``hookscope.store.watch_info`` is what ``hookscope info`` prints.
A run that a ``NonFiniteError`` ended (``nan_guard`` inside or around the watch) keeps it as the
manifest's ``non_finite`` (``non_finite_json``; ``read_non_finite`` gives the error back: ``run.non_finite``).
The steps at which a value is undefined rather than not measured are the manifest's ``series.undefined``
(site -> column -> steps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from torch import Tensor

from ..base.files import staged_folder
from ..base.words import closest
from ..core.compiled import known_name
from ..errors import DamagedShardError, NonFiniteError, NotCapturedError
from .format import cannot_write, write_manifest
from .history import COLUMNS, Alert, History
from .schema import NON_FINITE
from .shards import MappedShards, inside, read_index, write_shard

SOURCE = "watch"  # config.source of a watch store
SERIES = "series.safetensors"
SCALARS = "scalars.safetensors"


def is_watch(manifest: Mapping[str, Any]) -> bool:
    """Whether ``manifest`` is that of a store written by ``hookscope.watch``."""
    return bool(manifest.get("config", {}).get("source") == SOURCE)


def write_watch(
    root: Path,
    manifest: dict[str, Any],
    histories: Mapping[str, History],
    alerts: Sequence[Alert],
    *,
    whole: bool = False,
    ranks: Sequence[Mapping[str, History]] = (),
    scalars: Mapping[str, Tensor] | None = None,
) -> None:
    """Write the series file (and the scalars' file), then the manifest that names them (each atomically).
    ``whole``: the store's first write, made in a staged folder renamed to ``root`` when all are written, so a
    first write that fails leaves nothing (and an old store replaced under ``force`` stays until then).
    ``ranks``: each rank's own histories under torchrun, stored as ``rank{r}/{site}`` beside the merged ones."""
    if not whole:
        _write_all(root, manifest, histories, alerts, ranks, scalars)
        return
    with staged_folder(root, lambda err, folder: cannot_write(err, folder, root), parents=True) as staging:
        _write_all(staging, manifest, histories, alerts, ranks, scalars)


def _write_all(
    root: Path,
    manifest: dict[str, Any],
    histories: Mapping[str, History],
    alerts: Sequence[Alert],
    ranks: Sequence[Mapping[str, History]],
    scalars: Mapping[str, Tensor] | None,
) -> None:
    tensors = {name: h.rows.contiguous() for name, h in histories.items()}
    tensors.update({f"rank{r}/{n}": h.rows.contiguous() for r, hs in enumerate(ranks) for n, h in hs.items()})
    write_shard(root / SERIES, tensors, {"columns": list(COLUMNS)})
    steps = sorted({s for h in histories.values() for s in h.steps})
    series: dict[str, Any] = {"file": SERIES, "columns": list(COLUMNS), "logged_steps": len(steps), "ranks": len(ranks)}
    undefined = {name: h.undefined for name, h in histories.items() if h.undefined}
    if undefined:
        series["undefined"] = undefined
    extra = {}
    if scalars:
        write_shard(root / SCALARS, {k: v.contiguous() for k, v in scalars.items()}, {"columns": ["step", "value"]})
        extra = {"scalars": {"file": SCALARS, "names": list(scalars)}}
    write_manifest(root, {**manifest, "series": series, **extra, "alerts": [_alert_json(a) for a in alerts]})


def read_scalars(root: Path, manifest: Mapping[str, Any], mapped: MappedShards) -> dict[str, list[tuple[int, float]]]:
    """``{name: [(step, value), ...]}`` of the scalars ``w.log`` logged (empty for a store without any)."""
    entry = manifest.get("scalars")
    if not entry:
        return {}
    index = read_index(root / entry["file"])
    crc = index["meta"].get("crc32", {})
    out = {}
    for name in entry["names"]:
        dtype, shape, offsets = index["tensors"][name]
        rows = mapped.tensor(entry["file"], index["data_start"], dtype, shape, offsets, crc.get(name, -1))
        out[name] = [(int(step), float(value)) for step, value in rows.tolist()]
    return out


def read_histories(
    root: Path, manifest: Mapping[str, Any], mapped: MappedShards, *, prefix: str = ""
) -> dict[str, History]:
    """Every site's history, in the manifest's site order (tensors memory-mapped, each a float64
    ``(steps, len(COLUMNS))`` table, or the series file is damaged); ``prefix`` ``"rank1/"`` reads rank 1's
    own rows of a watch under torchrun."""
    series = manifest.get("series")
    if not series:
        return {}
    try:
        index = read_index(inside(root, series["file"]))
    except DamagedShardError as err:
        raise DamagedShardError(series["file"], err.why, "; the store's time series cannot be read") from err
    types = {s["name"]: s.get("type", "?") for s in manifest.get("sites", [])}
    undefined = series.get("undefined", {}) if not prefix else {}
    crc = index["meta"].get("crc32", {})
    out = {}
    for name in [s for s in types if prefix + s in index["tensors"]]:
        dtype, shape, offsets = index["tensors"][prefix + name]
        if dtype != "float64" or len(shape) != 2 or shape[1] != len(COLUMNS):
            raise DamagedShardError(series["file"], f"the series of {prefix + name!r} is {dtype} {shape}, not "
                                    f"float64 (steps, {len(COLUMNS)})")  # fmt: skip
        rows = mapped.tensor(series["file"], index["data_start"], dtype, shape, offsets, crc.get(prefix + name, -1))
        out[name] = History(name, types[name], rows, undefined.get(name))
    return out


def pick(histories: Mapping[str, History], name: str, root: Path) -> History:
    """``histories[name]`` (``name`` with or without a wrapper's ``module.``: ``core.compiled.known_name``; the
    model itself as ``""`` or ``(model)``, as tables show it), or a ``NotCapturedError`` naming the closest."""
    name = "" if name == "(model)" and "" in histories else known_name(name, histories)
    if name not in histories:
        what = (
            "holds no time series (it was not written by hookscope.watch)"
            if not histories
            else (f"watched {len(histories)} modules{closest(name, histories)}")
        )
        raise NotCapturedError(f"{name!r} has no history in {root}: the store {what}")
    return histories[name]


def read_alerts(manifest: Mapping[str, Any]) -> list[Alert]:
    return [
        Alert(**{**a, "value": _number(a["value"]), "bound": _number(a["bound"])}) for a in manifest.get("alerts", [])
    ]


def non_finite_json(err: NonFiniteError) -> dict[str, Any]:
    """The manifest's ``non_finite``: where ``err`` was found (``schema.NON_FINITE``), and its message."""
    row = {name: getattr(err, name) for name in NON_FINITE if name != "message"}
    absmax = err.input_absmax
    return {**row, "input_absmax": None if absmax is None else _text(float(absmax)), "message": str(err)}


def read_non_finite(manifest: Mapping[str, Any]) -> NonFiniteError | None:
    """The ``NonFiniteError`` that ended the watched run, as it was raised (None: the run did not end on one)."""
    row = manifest.get("non_finite")
    if row is None:
        return None
    fields = {name: row[name] for name in NON_FINITE if name != "message"}
    absmax = fields["input_absmax"]
    return NonFiniteError(row["message"], **{**fields, "input_absmax": None if absmax is None else float(absmax)})


def read_rank_histories(root: Path, manifest: Mapping[str, Any], mapped: MappedShards) -> list[dict[str, History]]:
    """Each rank's own histories (a watch under torchrun), in rank order; empty for one process."""
    ranks = int((manifest.get("series") or {}).get("ranks", 0))
    return [read_histories(root, manifest, mapped, prefix=f"rank{r}/") for r in range(ranks)]


def _alert_json(alert: Alert) -> dict[str, Any]:
    row = asdict(alert)
    return {**row, "value": _text(alert.value), "bound": _text(alert.bound)}


def _text(value: float) -> float | str:
    """JSON has no NaN or infinity: those are written as text (``"nan"``, ``"inf"``)."""
    return value if math.isfinite(value) else str(value)


def _number(value: float | str) -> float:
    return float(value)
