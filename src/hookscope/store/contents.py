"""What ``hookscope info`` prints of a store: its state, provenance, damage, then one row per (site, kind, key).

``describe(run)`` is ``Run.describe``'s text. The head says whether the store is complete or
interrupted, and "damaged" with every shard left out, the batches it cost and why; then whether
the tensors' bytes were checked (``hookscope info --verify``: every CRC-32, all data read) or only
the headers and the manifest (the default: fast, reads no tensor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..base.words import columns, format_size
from ..core.records import Label
from ..stats.streaming import RunningStats
from . import series
from .history import History
from .index import ranges
from .watch_info import describe_watch


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


class Run(Protocol):
    """What ``describe`` reads of a store opened by ``hookscope.store.reader.load``."""

    path: Path
    manifest: dict[str, Any]
    provenance: dict[str, Any]
    config: dict[str, Any]
    complete: bool
    damaged: dict[str, str]
    checked: str | None

    @property
    def batches(self) -> list[int]: ...
    @property
    def rows(self) -> int | None: ...
    @property
    def lost(self) -> dict[int, str]: ...
    def histories(self) -> Mapping[str, History]: ...
    def scalars(self) -> Mapping[str, list[tuple[int, float]]]: ...
    def statistics(self) -> Mapping[Label, RunningStats]: ...
    def contents(self) -> list[Contents]: ...


def describe(run: Run) -> str:
    """The text of ``hookscope info``: see the module docstring."""
    if series.is_watch(run.manifest):
        return describe_watch(run.path, run.manifest, run.histories(), run.scalars())
    prov, config = run.provenance, run.config
    shards = run.manifest.get("shards", [])
    rows = f" ({run.rows:,} rows)" if run.rows is not None else ""
    reduce = f", reduce {config['reduce']}" if config.get("reduce") else ""
    ranks = f", {config['world_size']} processes" if config.get("world_size", 1) > 1 else ""
    size = f"{format_size(sum(s['bytes'] for s in shards))} in {len(shards)} shard{'s' * (len(shards) != 1)}"
    head = [
        f"{run.path}: hookscope store (format {run.manifest.get('version')}), {_state(run)}",
        f"model     {prov.get('model', '?')} ({prov.get('model_module', '?')}), {prov.get('parameters', 0):,} "
        f"parameters, weights sha256 {str(prov.get('weights_sha256', '?'))[:16]}",
        f"made by   hookscope {prov.get('hookscope')}, torch {prov.get('torch')}, Python {prov.get('python')}, "
        f"{prov.get('created')}",
        f"run       {config.get('source', '?')}: select {config.get('select') or 'every leaf'}, kinds "
        f"{', '.join(config.get('kinds', []))}{reduce}{ranks}",
        f"batches   {len(run.batches)}{rows}",
        f"size      {size}",
        *damage_lines(run),
        *([_checked(run)] if shards else []),
        "",
    ]
    return "\n".join(head + columns(_contents_rows(run), right={6, 7, 8, 9, 10, 11}))


def _state(run: Run) -> str:
    state = "complete" if run.complete else "interrupted: `hookscope extract ... --resume` continues it"
    if not run.damaged:
        return state
    lost = run.lost
    return f"{state}; damaged: {ranges(sorted(lost))} lost with {len(run.damaged)} shard(s), read without them"


def damage_lines(run: Run) -> list[str]:
    """One line per damaged shard: its file, the batches it cost, what is wrong with it."""
    lost = run.lost
    lines = []
    for file, why in run.damaged.items():
        cost = ranges(sorted(b for b, f in lost.items() if f == file))
        lines.append(f"damaged   {file}: {cost} ({why})")
    return lines


def _checked(run: Run) -> str:
    if run.checked == "data":
        return "data      verified: every shard's header and every tensor's CRC-32 (all bytes read)"
    return ("data      not verified: the manifest and the shards' headers were checked, not the tensors' bytes; "
            "`hookscope info --verify` reads every tensor's CRC-32")  # fmt: skip


def _contents_rows(run: Run) -> list[Sequence[str]]:
    """The table of ``describe``: one row per (site, kind, key), with statistics for a statistics store."""
    stats = run.statistics()
    rows: list[Sequence[str]] = []
    for c in run.contents():
        row = [c.site, c.type, c.kind, c.key, str(c.shape), c.dtype, f"{c.tensors:,}"]
        if stats:
            s = stats[(c.site, c.kind, c.key)]
            rows.append([*row, f"{s.count:,}", *(f"{v:.4g}" for v in (s.mean, s.std, s.min, s.max))])
        else:
            rows.append([*row, format_size(c.nbytes)])
    last = ["values", "mean", "std", "min", "max"] if stats else ["size"]
    return [["site", "type", "kind", "key", "shape", "dtype", "calls" if stats else "tensors", *last], *rows]
