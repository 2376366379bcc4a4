"""``extract``: what the layers of a model produce over a whole dataset, streamed to a store.

::

    run = hookscope.extract(model, loader, select="features.*", out="acts.hookscope", max_memory="2GB")
    run["features.3"].calls[17].output          # batch 17's output, read from disk when used
    hookscope.extract(model, loader, select="features.*", out="stats.hookscope", stats_only=True)

One capture stays open for the whole run (hooks registered once); each batch runs under
``torch.no_grad()``, its kept tensors are handed to a background writer (``hookscope.store.shard_writer``;
the loop is ``hookscope.store.extract_job``) and the capture is cleared, so memory stays flat: what
hookscope holds never exceeds ``max_memory`` plus the batch being computed. ``reduce=`` shrinks each
tensor in the hook (``hookscope.reducers``). Only the kinds that are not gradients are extracted
(``hookscope.core.kinds.forward_kinds()``: ``input``, ``output``), and with ``target=`` the
gradients of a call too (``grad_input``, ``grad_output``): each batch then runs its backward pass.

``stats_only=True`` keeps nothing but a ``RunningStats`` per (site, kind, key), updated in the
hook and merged batch by batch (``per_channel=True``: also per channel, along dim 1, or the
dim given). Statistics are checkpointed every ``flush_every`` seconds and when the run ends.

Crash safety: a shard is complete or absent (``hookscope.store.shards``), and a finished batch is
on disk within ``flush_every`` seconds (default ``FLUSH_EVERY``) plus the time to write it. A run
killed at any moment leaves a store that ``load`` opens with every batch finished before that
bound; Ctrl-C (``KeyboardInterrupt``) writes every finished batch first, then propagates with a
note naming the store and ``resume=True``. ``resume=True`` runs only the batches that are
missing (``hookscope.store.ranks`` says how they are skipped; how a store is opened, resumed
and finished is in ``hookscope.store.format``). Under ``torchrun`` each rank extracts its share
into its own shards and rank 0 writes the manifest at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from torch import nn

from ..base.deprecation import renamed
from ..base.words import parse_size
from ..base.world import World
from ..core import kinds
from ..core.channels import channel_count
from ..core.experts import unwritten_note
from ..core.kinds import Kind
from ..core.policy import Reducer
from ..core.scripted import is_scripted
from ..core.select import Selector, select_modules, selector_text
from ..errors import OptionError, StoreError, StoreWarning
from ..progress import Progress
from ..reducers import reducer_name
from . import format as store_format
from .batches import (
    Forward,
    Loss,
    default_forward,
    model_device,
    trainable_parameters,
    unless_empty,
    warn_if_takes_batch,
)
from .extract_job import ExtractJob
from .format import FLUSH_EVERY, MAX_MEMORY, SHARD_SIZE, check_flush_every
from .ranks import share
from .reader import Run, load
from .save import provenance
from .throughput import Meter
from .token_layout import check_layout


@renamed(loss="target")
def extract(
    model: nn.Module,
    loader: Iterable[Any],
    *,
    out: str | os.PathLike[str],
    select: Selector | None = None,
    kinds: Kind | Iterable[Kind] = ("output",),
    max_memory: int | str = MAX_MEMORY,
    reduce: Reducer | None = None,
    stats_only: bool = False,
    per_channel: bool | int = False,
    resume: bool = False,
    force: bool = False,
    progress: Progress = True,
    forward: Forward | None = None,
    shard_size: int | str = SHARD_SIZE,
    flush_every: float | None = FLUSH_EVERY,
    target: Loss | None = None,
    layout: str = "rows",
    graph: Any = None,
) -> Run:
    """Run ``model`` over every batch of ``loader`` and stream what ``select`` picks to the store ``out``.

    A run that fails keeps the batches finished before it (``resume=True`` continues); one whose
    model or data fails before its first batch finished leaves no store behind (one process).

    Args:
        model: the network; batches' tensors go to its device.
        loader: an iterable of batches: a tensor, an ``(inputs, ...)`` tuple or list (the first item is the
            model's input), or a dict of keyword arguments (a ``DataLoader``, a list...).
        out: the store's folder.
        select: the modules kept; None keeps every leaf module.
        kinds: the kinds kept (default ``output``); gradient kinds need ``target``.
        max_memory: the bytes of finished batches held before they are written, or as text (``"2GB"``;
            default ``store.format.MAX_MEMORY``, 1GB, as ``StoreStream``'s buffer).
        reduce: ``(site, kind, key, tensor) -> tensor | None`` applied in the hook (``hookscope.reducers``).
        stats_only: keep ``RunningStats`` per (site, kind, key) instead of tensors.
        per_channel: with ``stats_only``, also per channel: True for dim 1, or the channel dimension.
        resume: continue an existing store, skipping the batches it holds.
        force: replace an existing store (never a folder holding files hookscope did not write).
        progress: ``hookscope.progress``, on by default (a dataset run is long): its lines with throughput,
            on stderr (``True``) or the given stream, when the run ends and every 10 s before; none (``False``
            or None); or a callable told ``("extract", batches done, batches in all)`` after each batch (0 in
            all when the loader has no length).
        forward: ``forward(model, batch)`` for batches of another shape; None reads them as above.
        shard_size: the most bytes per shard file, or as text (default ``store.format.SHARD_SIZE``, 256MB,
            as ``save`` and ``export``).
        flush_every: seconds a finished batch may wait in memory before it is written, in a shard not yet
            full; None writes only full shards and the end of the run.
        target: ``target(output)`` (``hookscope.explain.targets``' one contract; ``output`` is what ``forward``
            returned, so a loss with labels is ``forward=lambda m, b: (m(b[0]), b[1])``,
            ``target=lambda o: F.cross_entropy(*o)``), a scalar or one value per row (summed), whose backward
            pass each batch runs, so ``grad_output`` and ``grad_input`` can be kept too (``param.grad`` is
            never written); None runs none. ``loss=`` and ``target(output, batch)`` are its old spelling and
            contract (both deprecated).
        layout: ``rows`` (the default) or ``tokens``: each site as one flat ``(tokens, features)`` array per
            shard, padding left out where batches carry an ``attention_mask``, so a random token is one read
            (``hookscope.store.token_layout``). Batches with ``input_ids`` keep them beside the activations.
        graph: a ``hookscope.Graph`` (``module_graph``) kept in the manifest, for the store's report; None
            keeps none.

    Returns:
        The store, opened (``load(out)``).

    Raises:
        OutputExistsError: ``out`` exists and neither ``resume`` nor ``force`` was given, or it holds
            files hookscope did not write.
        OptionError: an unknown kind, a gradient kind without ``target``, a bad ``target``,
            ``flush_every``, ``per_channel`` or ``layout``.
        SelectionError: ``select`` matches no module.
        StoreError: the store cannot be written, or the one resumed was made with other options.
    """
    chosen = _check_kinds(model, kinds, target)
    limit = parse_size(max_memory)
    check_flush_every(flush_every)
    root, device = Path(os.path.abspath(out)), model_device(model)
    world = World.join(device)
    header = _header(model, select, chosen, reduce, stats_only, _channel_dim(per_channel), world, target)
    select = _selected(model, select)
    _record_options(header, layout, stats_only, graph)
    done = _prepare(root, header, world, resume=resume, force=force)
    batches, total = share(loader, world, done)
    meter = Meter(progress if world.rank == 0 else None, total)
    run_forward = forward or default_forward(device)
    job = ExtractJob(root, model, select, chosen, reduce, world, meter, run_forward, flush_every, target, layout)
    todo = unless_empty(batches)  # nothing left (a finished store resumed): no capture, so no warning
    with _kept_or_discarded(root, world, resume=resume):
        if todo is not None and stats_only:
            job.statistics(todo, _channel_dim(per_channel))
        elif todo is not None:
            job.tensors(todo, limit, parse_size(shard_size))
    _finish(root, world)
    return load(root)


def _selected(model: nn.Module, select: Selector | None) -> Selector | None:
    """``select``, or where it picks a fused layer's experts (``:experts``), their modules: no site per expert."""
    if note := unwritten_note(modules := select_modules(model, select), select):  # core.experts
        warnings.warn(f"hookscope.extract: {note}", StoreWarning, stacklevel=4)
        return [name for name, _ in modules]  # the modules ":experts" picks, not their experts
    return select


def _record_options(header: dict[str, Any], layout: str, stats_only: bool, graph: Any) -> None:
    """The manifest's layout (a token store's: a row store's config has none, as before) and graph."""
    if check_layout(layout, stats_only) == "tokens":
        header["config"]["layout"] = layout
    if graph is not None:
        header["graph"] = graph.as_dict()


@contextlib.contextmanager
def _kept_or_discarded(root: Path, world: World, *, resume: bool) -> Iterator[None]:
    """A run that fails releases the store: Ctrl-C with a note on how to continue, anything else leaving
    no store behind when no batch finished (``_discard_if_empty``)."""
    try:
        yield
    except KeyboardInterrupt as interrupt:
        kept = len(store_format.done_batches(root))
        interrupt.add_note(f"hookscope.extract was interrupted; the store {root} keeps the {kept} batches finished "
                           "before it: rerun with resume=True to continue it")  # fmt: skip
        store_format.release(root)
        raise
    except Exception as err:
        store_format.release(root)
        _discard_if_empty(root, world, err, resume=resume)
        raise


def _finish(root: Path, world: World) -> None:
    """Every rank done, rank 0 writes the manifest's end; then every rank may read the store."""
    world.barrier()
    if world.rank == 0:
        store_format.finish(root)
    world.barrier()


# -- the store: opened by rank 0, then read by every rank -------------------------------------------
def _prepare(root: Path, header: dict[str, Any], world: World, *, resume: bool, force: bool) -> set[int]:
    """Rank 0 makes (or reopens) the store; then every rank learns which batches are already in it."""
    if world.rank == 0:
        store_format.open_for_extract(root, header, resume=resume, force=force)
    world.barrier()
    return store_format.done_batches(root) if resume else set()


def _discard_if_empty(root: Path, world: World, err: Exception, *, resume: bool) -> None:
    """A new store whose model or data failed before any batch finished goes: no half-made store left
    behind. A full disk (a ``StoreError``) keeps its store, as its message says; ranks and resumed runs too."""
    if not isinstance(err, StoreError) and world.size == 1 and not resume and not store_format.done_batches(root):
        shutil.rmtree(root, ignore_errors=True)


# -- small parts ---------------------------------------------------------------------------------
def _header(model: nn.Module, select: Selector | None, chosen: tuple[Kind, ...], reduce: Reducer | None,
            stats_only: bool, channel_dim: int | None, world: World,
            target: Loss | None) -> dict[str, Any]:  # fmt: skip
    sites: list[dict[str, Any]] = [
        {"name": name, "type": type(m).__name__, "kinds": list(chosen), "params": [], "missing": {},
         "channels": channel_count(m)}
        for name, m in select_modules(model, select) if not is_scripted(m)  # the capture warns they are left out
    ]  # fmt: skip
    config = {"source": "extract", "select": selector_text(select), "kinds": list(chosen),
              "reduce": reducer_name(reduce), "stats_only": bool(stats_only), "per_channel": channel_dim,
              "world_size": world.size,
              "target": None if target is None else getattr(target, "__qualname__", type(target).__name__)}  # fmt: skip
    return store_format.new_manifest(provenance(model), config, sites)


def _check_kinds(model: nn.Module, asked: Kind | Iterable[Kind], target: Loss | None) -> tuple[Kind, ...]:
    """The kinds a run keeps; with a target, also a check that the model has something to differentiate."""
    if target is not None and not callable(target):
        raise OptionError(f"extract's target must be a callable on the model's output, target(output), "
                          f"returning a scalar or one value per row; got {type(target).__name__}")  # fmt: skip
    if target is not None:
        trainable_parameters(model)
        warn_if_takes_batch(target)
    forward = kinds.forward_kinds()
    per_call = tuple(k for k in kinds.names() if kinds.TABLE[k].per_call)
    chosen, wrong = kinds.choose(asked, forward if target is None else per_call)
    got = (", ".join(map(repr, wrong)) or "none") + kinds.misspelled(wrong)
    if target is None and (wrong or not chosen):
        raise OptionError(
            f"extract captures forward kinds ({', '.join(forward)}), got {got}; "
            "for gradients, pass target=fn(output) -> scalar, whose backward pass each batch runs"
        )
    if wrong or not chosen:
        raise OptionError(
            f"extract keeps the kinds of a call ({', '.join(per_call)}), got {got}; "
            "a parameter's gradient per batch is a copy of the weights per batch: use hookscope.capture for one"
        )
    return chosen


def _channel_dim(per_channel: bool | int) -> int | None:
    if per_channel is True:
        return 1
    if per_channel is False or per_channel is None:
        return None
    if not isinstance(per_channel, int):
        raise OptionError(f"per_channel must be True, False or a dimension (int), got {per_channel!r}")
    return per_channel
