"""What ``hookscope info`` prints of a watch store: the run, its scalars, its alerts, the last row of every site."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..base.words import columns, format_size
from ..errors import NonFiniteError, StoreError
from .history import History, step_span
from .series import read_alerts, read_non_finite


def describe_watch(
    path: Path,
    manifest: Mapping[str, Any],
    histories: Mapping[str, History],
    scalars: Mapping[str, Sequence[tuple[int, float]]] | None = None,
) -> str:
    """What ``hookscope info`` prints of a watch store: the run, its scalars, its alerts, the last row of every site."""
    prov, config = manifest.get("provenance", {}), manifest.get("config", {})
    alerts = read_alerts(manifest)
    steps = sorted({s for h in histories.values() for s in h.steps})
    try:
        size = format_size(sum(p.stat().st_size for p in path.iterdir() if p.is_file()))
    except OSError as err:
        raise StoreError(f"cannot read {path}: {err.strerror or err}") from err
    state = "complete" if manifest.get("status") == "complete" else "interrupted (the run did not reach its end)"
    head = [
        f"{path}: hookscope watch store (format {manifest.get('version')}), {state}",
        f"model     {prov.get('model', '?')} ({prov.get('model_module', '?')}), "
        f"{prov.get('parameters', 0):,} parameters",
        f"made by   hookscope {prov.get('hookscope')}, torch {prov.get('torch')}, Python {prov.get('python')}, "
        f"{prov.get('created')}",
        f"run       watch every {config.get('every')} steps: {config.get('steps', 0):,} steps, {len(steps)} logged "
        f"({step_span(steps)}), select {config.get('select') or 'every module holding parameters, and activations'}",
        *_ranks_line(config, manifest.get("series") or {}),
        *_stopped_line(read_non_finite(manifest)),
        *scalar_lines(scalars or {}),
        f"alerts    {len(alerts)}" + "".join(f"\n          {a}" for a in alerts[:10]),
        f"size      {size}",
        "",
    ]
    shown = ("grad_norm", "update_ratio", "dead", "act_std")
    rows = [["site", "type", "steps", *(f"last {c}" for c in shown)]]
    rows += [[n or "(model)", h.type, str(len(h)), *(_last_cell(h, c) for c in shown)] for n, h in histories.items()]
    return "\n".join(head + columns(rows, right={2, 3, 4, 5, 6}))


def scalar_lines(scalars: Mapping[str, Sequence[tuple[int, float]]]) -> list[str]:
    """The scalars of ``w.log`` a watch store keeps: one line each, its values, first and last step, last value."""
    if not scalars:
        return ["scalars   none (w.log(loss=...) keeps them beside the statistics)"]
    width = max(len(name) for name in scalars)
    lines = [f"scalars   {len(scalars)} logged with w.log (run.scalars())"]
    for name, pairs in scalars.items():
        steps = sorted(step for step, _ in pairs)
        last = f", last {_cell(pairs[-1][1])}" if pairs else ""
        values = f"{len(pairs):,} value{'s' * (len(pairs) != 1)}"
        lines.append(f"          {name:<{width}}  {values}, {step_span(steps)}{last}")
    return lines


def _ranks_line(config: Mapping[str, Any], series: Mapping[str, Any]) -> list[str]:
    """Under torchrun: how many ranks, and that the rows are merged over them (each rank's kept too)."""
    size = int(config.get("world_size", 1))
    if size <= 1:
        return []
    kept = "; each rank's own rows are kept as rank<r>/<site>" if series.get("ranks") else ""
    return [f"ranks     {size} under torchrun: statistics merged over the ranks{kept}"]


def _stopped_line(err: NonFiniteError | None) -> list[str]:
    """The ``NonFiniteError`` that ended the run: where it was found, then its message."""
    if err is None:
        return []
    rank = "" if err.rank is None else f", rank {err.rank}"
    call = "" if err.call is None else f" call {err.call}"
    who = repr(err.module) if err.module else "the model"
    where = f"step {err.step}, {err.phase}, {who}{call}, {err.kind} {err.key}{rank}"
    return [f"ended by  NonFiniteError at {where}\n          {err}"]


def _last_cell(history: History, column: str) -> str:
    last = history.last()
    return "undefined" if last and int(last["step"]) in history.undefined.get(column, ()) else _cell(last.get(column))


def _cell(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3g}"
