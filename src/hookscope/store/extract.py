"""``extract``: what the layers of a model produce over a whole dataset, streamed to a store.

::

    run = hookscope.extract(model, loader, select="features.*", out="acts.hookscope", max_memory="2GB")
    run["features.3"].calls[17].output          # batch 17's output, read from disk when used
    hookscope.extract(model, loader, select="features.*", out="stats.hookscope", stats_only=True)

One capture stays open for the whole run (hooks registered once); each batch runs under
``torch.no_grad()``, its kept tensors are handed to a background writer
(``hookscope.writer``) and the capture is cleared, so memory stays flat: what hookscope holds
never exceeds ``max_memory`` plus the batch being computed. ``reduce=`` shrinks each tensor
in the hook (``hookscope.reducers``). Only forward kinds (``input``, ``output``) are extracted.

``stats_only=True`` keeps nothing but a ``RunningStats`` per (site, kind, key), updated in the
hook and merged batch by batch (``per_channel=True``: also per channel, along dim 1, or the
dim given). Statistics are checkpointed every ``CHECKPOINT_SECONDS`` and when the run ends.

Crash safety: a shard is complete or absent (``hookscope.shards``); a killed run leaves a
store that ``load`` opens with every completed batch, and ``resume=True`` runs only the
batches that are missing (``hookscope.ranks`` says how they are skipped). Under ``torchrun``
each rank extracts its share into its own shards and rank 0 writes the manifest at the end.
"""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import Tensor, nn

from ..core.capture import capture
from ..core.policy import Label, Reducer
from ..core.records import Kind
from ..core.select import Selector, select_modules
from ..core.tree import flatten
from ..errors import OptionError, StoreError
from ..reducers import describe
from ..stats.streaming import RunningStats, merge_tables
from . import save as store
from .ranks import World, share
from .reader import Run, read_stats
from .shard_writer import Pending, ShardWriter
from .shards import Mapped, format_size, parse_size, write_json, write_stats

FORWARD_KINDS: tuple[Kind, ...] = ("input", "output")
CHECKPOINT_SECONDS = 10.0
Forward = Callable[[nn.Module, Any], Any]


def extract(
    model: nn.Module,
    loader: Iterable[Any],
    *,
    out: str | os.PathLike[str],
    select: Selector | None = None,
    kinds: Kind | Iterable[Kind] = ("output",),
    max_memory: int | str = "2GB",
    reduce: Reducer | None = None,
    stats_only: bool = False,
    per_channel: bool | int = False,
    resume: bool = False,
    force: bool = False,
    progress: bool | TextIO = True,
    forward: Forward | None = None,
    shard_size: int | str = "256MB",
) -> Run:
    """Run ``model`` over every batch of ``loader`` and stream what ``select`` picks to the store ``out``.

    A batch is a tensor, an ``(inputs, ...)`` tuple or list (the first item is the model's
    input), or a dict of keyword arguments; ``forward(model, batch)`` handles anything else.
    Tensors go to the model's device. ``progress``: a line with throughput on stderr when it is
    a terminal (``True``), on the given stream, or none (``False``). An existing store is
    refused unless ``resume`` (continue it) or ``force`` (replace it). Returns ``store.load(out)``.
    """
    chosen = _check_kinds(kinds)
    limit = parse_size(max_memory)
    root = Path(os.path.abspath(out))
    run_forward = forward or _default_forward(_device(model))
    world = World.join(_device(model))
    header = _header(model, select, chosen, reduce, stats_only, _channel_dim(per_channel), world)
    done = _prepare(root, header, world, resume=resume, force=force)
    batches, total = share(loader, world, done)
    meter = Meter(_stream(progress) if world.rank == 0 else None, total)
    job = Job(root, model, select, chosen, reduce, world, meter, run_forward)
    todo = _unless_empty(batches)  # nothing left (a finished store resumed): no capture, so no warning
    if todo is not None and stats_only:
        job.statistics(todo, _channel_dim(per_channel))
    elif todo is not None:
        job.tensors(todo, limit, parse_size(shard_size))
    world.barrier()
    if world.rank == 0:
        _finish(root)
    world.barrier()
    return store.load(root)


class Job:
    """One rank's extraction loop, in its two flavours: tensors to shards, or statistics."""

    def __init__(self, root: Path, model: nn.Module, select: Selector | None, kinds: tuple[Kind, ...],
                 reduce: Reducer | None, world: World, meter: Meter, forward: Forward) -> None:  # fmt: skip
        self.root, self.model, self.select, self.kinds, self.reduce = root, model, select, kinds, reduce
        self.world, self.meter, self.forward = world, meter, forward
        self.token = f"r{world.rank}-{secrets.token_hex(4)}"  # this rank, this run: file names never collide

    def tensors(self, batches: Iterator[tuple[int, Any]], limit: int, shard_size: int) -> None:
        folder = self.root / store.SHARDS
        writer = ShardWriter(folder, self.token, rank=self.world.rank, limit=limit, shard_size=shard_size)
        try:
            with capture(self.model, self.select, kinds=self.kinds, device="cpu", reduce=self.reduce) as cap:
                for index, batch in batches:
                    self._run(batch)
                    listed, tensors = store.entries(cap, index, prefix=f"b{index}.")
                    cap.clear()
                    rows, nbytes = _rows(batch), sum(t.nbytes for t in tensors.values())
                    writer.put(Pending(index, rows, listed, tensors, nbytes))
                    self.meter.step(rows, writer.written)
        except StoreError as err:  # the writer's: the disk is full, the folder went away
            writer.close(raise_error=False)
            raise _kept(err, writer) from err
        except BaseException:
            writer.close(raise_error=False)  # the batches completed so far still reach the disk
            raise
        else:
            try:
                writer.close()
            except StoreError as err:
                raise _kept(err, writer) from err
        finally:
            self.meter.close(writer.written)

    def statistics(self, batches: Iterator[tuple[int, Any]], channel_dim: int | None) -> None:
        accumulate = Accumulate(self.reduce, channel_dim)
        table: dict[Label, RunningStats] = {}
        covered: list[dict[str, Any]] = []
        checkpoint = Checkpoint(self.root / store.STATS_PARTS, self.token, self.world.rank)
        try:
            with capture(self.model, self.select, kinds=self.kinds, reduce=accumulate) as cap:
                for index, batch in batches:
                    accumulate.table = {}
                    self._run(batch)
                    cap.clear()
                    table = merge_tables([table, accumulate.table])  # only whole batches count
                    covered.append({"index": index, "rows": _rows(batch)})
                    checkpoint.maybe(table, covered)
                    self.meter.step(_rows(batch), 0)
        finally:
            checkpoint.write(table, covered)
            self.meter.close(0)

    def _run(self, batch: Any) -> None:
        with torch.no_grad():
            self.forward(self.model, batch)


class Accumulate:
    """The ``reduce=`` of a statistics run: updates this batch's ``RunningStats`` and keeps nothing."""

    def __init__(self, reduce: Reducer | None, channel_dim: int | None) -> None:
        self.reduce, self.channel_dim = reduce, channel_dim
        self.table: dict[Label, RunningStats] = {}

    def __call__(self, site: str, kind: str, key: str, tensor: Tensor) -> None:
        kept = self.reduce(site, kind, key, tensor) if self.reduce is not None else tensor
        if kept is not None:
            label = (site, kind, key)
            if label not in self.table:
                self.table[label] = RunningStats(channel_dim=self.channel_dim)
            self.table[label].update(kept)


class Checkpoint:
    """A rank's statistics so far, written every ``CHECKPOINT_SECONDS``; each replaces the previous one."""

    def __init__(self, folder: Path, token: str, rank: int) -> None:
        self.folder, self.token, self.rank = folder, token, rank
        self.count = 0
        self.last = time.monotonic()
        self.previous: Path | None = None

    def maybe(self, table: Mapping[Label, RunningStats], covered: list[dict[str, Any]]) -> None:
        if time.monotonic() - self.last >= CHECKPOINT_SECONDS:
            self.write(table, covered)

    def write(self, table: Mapping[Label, RunningStats], covered: list[dict[str, Any]]) -> None:
        if not covered:
            return
        path = self.folder / f"{self.token}-{self.count:06d}.safetensors"
        write_stats(path, table, {"rank": self.rank, "batches": covered})
        if self.previous is not None:
            self.previous.unlink(missing_ok=True)
        self.previous, self.count, self.last = path, self.count + 1, time.monotonic()


class Meter:
    """One line of progress: a bar (when the number of batches is known), rows per second, bytes
    written and their rate; redrawn at most five times a second."""

    def __init__(self, stream: TextIO | None, total: int | None) -> None:
        self.stream, self.total = stream, total
        self.batches = self.rows = 0
        self.start = self.shown = time.monotonic()

    def step(self, rows: int | None, written: int) -> None:
        self.batches += 1
        self.rows += rows or 0
        if self.stream is not None and time.monotonic() - self.shown >= 0.2:
            self._show(written, end="")

    def close(self, written: int) -> None:
        if self.stream is not None:
            self._show(written, end="\n")

    def _show(self, written: int, end: str) -> None:
        self.shown = time.monotonic()
        seconds = max(self.shown - self.start, 1e-9)
        bar = ""
        if self.total:
            filled = 24 * min(self.batches, self.total) // self.total
            bar = f"[{'#' * filled}{'.' * (24 - filled)}] "
        of = f"/{self.total}" if self.total is not None else ""
        line = f"\rextract: {bar}{self.batches}{of} batches, {self.rows / seconds:,.1f} rows/s"
        if written:
            line += f", {format_size(written)} written ({format_size(written / seconds)}/s)"
        print(line, end=end, file=self.stream or sys.stderr, flush=True)


# -- the store: opened, checked, finished ------------------------------------------------------
def _prepare(root: Path, header: dict[str, Any], world: World, *, resume: bool, force: bool) -> set[int]:
    """Rank 0 makes (or reopens) the store; then every rank learns which batches are already in it."""
    if world.rank == 0:
        _open(root, header, resume=resume, force=force)
    world.barrier()
    return {b["index"] for b in store.index_parts(root)["batches"]} if resume else set()


def _open(root: Path, header: dict[str, Any], *, resume: bool, force: bool) -> None:
    if resume and (root / store.MANIFEST).is_file():
        old = store.read_manifest(root)
        _check_same(root, old, header)
        if old.get("status") == "complete" and (root / store.STATS).is_file():  # its merged statistics become a part
            (root / store.STATS_PARTS).mkdir(exist_ok=True)
            os.replace(root / store.STATS, root / store.STATS_PARTS / "r0-previous-000000.safetensors")
        elif (root / store.STATS).is_file():  # a merge that a killed run did not finish; its parts are still there
            (root / store.STATS).unlink()
        _remove_leftovers(root)
        fresh = store.new_manifest(old.get("provenance", {}), old.get("config", {}), old.get("sites", []))
        write_json(root / store.MANIFEST, fresh)
        return
    if root.exists() and not (root.is_dir() and not any(root.iterdir())):  # anything but an empty folder
        if not force:
            raise StoreError(f"{root} already exists; pass resume=True to continue it or force=True to replace it")
        shutil.rmtree(root) if root.is_dir() else root.unlink()
    store.make_folder(root / store.SHARDS, root)
    (root / store.STATS_PARTS).mkdir(exist_ok=True)
    write_json(root / store.MANIFEST, header)


def _check_same(root: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    """A store is resumed only by the run that made it: same weights, selectors, kinds, reduction, mode."""
    settings = ("select", "kinds", "reduce", "stats_only", "per_channel")
    pairs = [(k, old.get("config", {}).get(k), new["config"][k]) for k in settings]
    weights = old.get("provenance", {}).get("weights_sha256"), new["provenance"]["weights_sha256"]
    pairs.append(("weights", *weights))
    differ = [f"{name} {was!r} (now {now!r})" for name, was, now in pairs if was != now]
    if differ:
        raise StoreError(f"cannot resume {root}: it was made with {'; '.join(differ)}; use the same settings")


def _finish(root: Path) -> None:
    """Index every shard and merge every statistics part into the final manifest, marked complete."""
    manifest = {**store.read_manifest(root), **store.index_parts(root), "status": "complete"}
    if "stats" in manifest:
        table = read_stats(Mapped(root), manifest["stats"])
        write_stats(root / store.STATS, table, {"batches": manifest["batches"]})
        manifest["stats"] = {"file": store.STATS}
    write_json(root / store.MANIFEST, manifest)
    shutil.rmtree(root / store.STATS_PARTS, ignore_errors=True)
    _remove_leftovers(root)


def _kept(err: StoreError, writer: ShardWriter) -> StoreError:
    return StoreError(f"{err}; the store keeps the {len(writer.batches)} batches written before it: free space "
                      "(or fix the folder) and rerun with resume=True to continue")  # fmt: skip


def _remove_leftovers(root: Path) -> None:
    """Temporary files of shards a killed run was writing."""
    for folder in (root / store.SHARDS, root / store.STATS_PARTS, root):
        for tmp in folder.glob(".*.tmp") if folder.is_dir() else []:
            tmp.unlink(missing_ok=True)


# -- small parts ---------------------------------------------------------------------------------
def _header(model: nn.Module, select: Selector | None, kinds: tuple[Kind, ...], reduce: Reducer | None,
            stats_only: bool, channel_dim: int | None, world: World) -> dict[str, Any]:  # fmt: skip
    sites = [{"name": name, "type": type(m).__name__, "kinds": list(kinds), "params": [], "missing": {}}
             for name, m in select_modules(model, select)]  # fmt: skip
    config = {"source": "extract", "select": store.describe_selector(select), "kinds": list(kinds),
              "reduce": describe(reduce), "stats_only": bool(stats_only), "per_channel": channel_dim,
              "world_size": world.size}  # fmt: skip
    return store.new_manifest(store.provenance(model), config, sites)


def _check_kinds(kinds: Kind | Iterable[Kind]) -> tuple[Kind, ...]:
    chosen = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    wrong = [k for k in chosen if k not in FORWARD_KINDS]
    if wrong or not chosen:
        raise OptionError(
            f"extract captures forward kinds ({', '.join(FORWARD_KINDS)}), "
            f"got {', '.join(map(repr, wrong)) or 'none'}; "
            "for gradients, capture one batch with hookscope.capture and hookscope.save it"
        )
    return tuple(k for k in FORWARD_KINDS if k in chosen)


def _channel_dim(per_channel: bool | int) -> int | None:
    if per_channel is True:
        return 1
    if per_channel is False or per_channel is None:
        return None
    if not isinstance(per_channel, int):
        raise OptionError(f"per_channel must be True, False or a dimension (int), got {per_channel!r}")
    return per_channel


def _device(model: nn.Module) -> torch.device:
    first = next(itertools.chain(model.parameters(), model.buffers()), None)
    return first.device if first is not None else torch.device("cpu")


def _default_forward(device: torch.device) -> Forward:
    def forward(model: nn.Module, batch: Any) -> Any:
        if isinstance(batch, Tensor):
            return model(batch.to(device))
        if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], Tensor):
            return model(batch[0].to(device))
        if isinstance(batch, Mapping):
            return model(**{k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()})
        raise OptionError(
            f"cannot feed a batch of type {type(batch).__name__} to the model; pass a tensor, an (inputs, ...) "
            "tuple, a dict of keyword arguments, or forward=lambda model, batch: model(...)"
        )

    return forward


def _unless_empty(batches: Iterator[tuple[int, Any]]) -> Iterator[tuple[int, Any]] | None:
    first = next(batches, None)
    return None if first is None else itertools.chain([first], batches)


def _rows(batch: Any) -> int | None:
    leaves = flatten(batch, "batch")
    return int(leaves[0][1].shape[0]) if leaves and leaves[0][1].dim() else None


def _stream(progress: bool | TextIO) -> TextIO | None:
    if progress is True:
        return sys.stderr if sys.stderr.isatty() else None
    return progress or None
