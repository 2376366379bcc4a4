"""Watch a model while it trains: ``watch(model, optimizer, every=50) -> Watch``, a context manager.

::

    with hookscope.watch(model, optimizer=opt, every=50, out="runs/exp1.hookscope") as w:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
            w.step()                       # optional when an optimizer is given (steps.StepClock)
    w.history("conv2")["grad_norm"]        # one value per logged step
    w.alerts                               # vanishing / exploding gradients, dead units, update ratio, NaN

What is watched (``hookscope.store.series.COLUMNS``): per selected module (by default every leaf
with parameters and every activation module, ``nn.ReLU`` and its kin) the mean, std, mean |x| and
zero fraction of its output, the fraction of dead units, the norm of the output gradient, of the
parameter gradients (as the optimizer sees them, after accumulation), of the weights, and the
update ratio |Δw| / |w| of the optimizer step (its pre- and post-step hooks).

Cost: only steps ``0, every, 2 * every, ...`` are logged, and the module hooks exist only while a
logged step runs (registered when the step before it ends, removed when it ends), so the other
steps run the bare model, with nothing but the optimizers' step hooks, which return at once. A
logged step computes its statistics where the tensors are and brings them to the host once, when
it ends. Forward passes under ``torch.no_grad()`` (evaluation) are ignored. Watching changes
nothing of the training: no value, no flag, no random number. A ``torch.compile``d model runs its
compiled code on the steps not logged and eagerly on logged steps (``core.compiled.run_eagerly``).

Under torchrun (DDP, FSDP2, tensor parallelism: ``train.ranks``) every rank must open the watch:
DTensors are measured on their local pieces, a logged step gathers every rank's sums in one
collective and every rank logs the merged, global rows; rank 0 writes ``out`` and TensorBoard.
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from .. import display
from ..core.block import Block
from ..core.compiled import is_compiled, run_eagerly
from ..core.hooks import HandleGroup
from ..core.phase import call_phase
from ..core.placement import local, refuse_zero3, shard_note
from ..core.select import Selector, select_modules, selector_text
from ..errors import CaptureWarning, NotCapturedError, OptionError
from ..store.series import COLUMNS, SOURCE, Alert, History
from ..text import closest
from .alerts import Detector, Thresholds, thresholds_of
from .board import Board
from .collect import Gathered, host_row, measured
from .measures import dead_fraction, unit_dim
from .ranks import RankRows, Ranks, merge
from .steps import StepClock, optimizers_of
from .view import histories_table, series_plot, watch_html
from .watch_store import WatchStore

if TYPE_CHECKING:
    from PIL.Image import Image

ACTIVATIONS = "torch.nn.modules.activation"  # the module of nn.ReLU, nn.GELU, nn.Sigmoid, ...


def watch(
    model: nn.Module,
    optimizer: Optimizer | Iterable[Optimizer] | None = None,
    *,
    every: int = 50,
    select: Selector | None = None,
    out: str | os.PathLike[str] | None = None,
    tensorboard: str | os.PathLike[str] | None = None,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    force: bool = False,
    flush_every: float = 30.0,
) -> Watch:
    """A ``Watch`` of ``model``'s training (see the module docstring), to use as ``with watch(...) as w``.

    ``optimizer``: one or several; their step hooks measure the update ratio and, until ``w.step()``
    is first called, count the steps. ``select``: any selector (default: leaves with parameters and
    activation modules). ``out``: a store written when the block ends (and every ``flush_every``
    seconds of logged steps), refused if it exists unless ``force``. ``tensorboard``: a log folder for
    ``SummaryWriter`` (scalars per module; histograms of outputs, gradients and weights).
    """
    if not isinstance(every, int) or every < 1:
        raise OptionError(f"every= is the number of steps between logged steps, at least 1; got {every!r}")
    return Watch(model, optimizers_of(optimizer), every=every, select=select, out=out, tensorboard=tensorboard,
                 thresholds=thresholds_of(thresholds), force=force, flush_every=flush_every)  # fmt: skip


def default_sites(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every leaf with parameters, and every activation module (their outputs show dead units)."""

    def chosen(name: str, module: nn.Module) -> bool:
        leaf = next(module.children(), None) is None
        return leaf and (next(module.parameters(), None) is not None or type(module).__module__ == ACTIVATIONS)

    return select_modules(model, chosen)


class Watch(Block, display.Shows):
    """A training run being watched; ``step()``, ``history(name)`` and ``alerts`` (see ``watch``).

    Its block (``core.block``) holds the optimizers' step hooks for the whole block; the module
    hooks of a logged step are in a group of their own, removed when the step ends and at exit.
    """

    noun, remake = "watch", "hookscope.watch(...)"

    def __init__(self, model: nn.Module, optimizers: list[Optimizer], *, every: int, select: Selector | None,
                 out: str | os.PathLike[str] | None, tensorboard: str | os.PathLike[str] | None,
                 thresholds: Thresholds, force: bool, flush_every: float) -> None:  # fmt: skip
        super().__init__()  # no stance for the whole block: a compiled model runs eagerly on logged steps only
        refuse_zero3(model, "watch")
        self.model, self.every, self.thresholds = model, every, thresholds
        self.sites = default_sites(model) if select is None else select_modules(model, select)
        self.alerts: list[Alert] = []
        self._store = None if out is None else WatchStore(out, force=force)
        self.out = None if self._store is None else self._store.out
        self._select, self._flush_every, self._board_dir = select, flush_every, tensorboard
        self._params = {name: list(m.parameters()) for name, m in self.sites}
        self._owner = {id(p): name for name, ps in self._params.items() for p in ps}
        self._rows: dict[str, list[list[float]]] = {name: [] for name, _ in self.sites}
        self._alive: dict[str, collections.deque[Tensor]] = {n: collections.deque(maxlen=thresholds.dead_window)
                                                             for n, _ in self.sites}  # fmt: skip
        self._clock = StepClock(
            optimizers, on_end=self._ended, on_pre_optimizer=self._pre, on_post_optimizer=self._post
        )
        self._hooks = HandleGroup()  # the module hooks of the logged step running now
        self._step_eager = contextlib.ExitStack()  # a compiled model runs eagerly while a logged step runs
        self._gathered: dict[str, Gathered] | None = None  # while a logged step runs
        self._before: dict[int, Tensor] = {}  # parameter id -> its value before the optimizer step
        self._detector = Detector(thresholds)
        self._board: Board | None = None
        self._ranks = Ranks()  # the world, known when the block is entered (train.ranks)
        self._rank_rows = RankRows({}, 1)  # each rank's own rows, under torchrun
        self._sharded: set[str] = set()  # sites already looked at for a tensor-parallel shard

    # -- the block (core.block: entered once; a failed entry leaves no hook, no store) -----------
    def _install(self, handles: HandleGroup) -> None:
        self._ranks = Ranks.current()
        self._rank_rows = RankRows({n: type(m).__name__ for n, m in self.sites}, self._ranks.size)
        if self._store is not None:
            self._store.check()  # before anything is touched, on every rank
            self._ranks.barrier()  # then rank 0 creates it: no rank sees it half made
        self._clock.install(handles)
        self._board = Board(self._board_dir) if self._board_dir is not None and not self._ranks.rank else None
        self._arm()  # a torch.jit.script'ed site refuses hooks here: every hook goes
        if self._store is not None:
            self._open_store()  # last: a failed entry writes no store

    def _release(self) -> None:
        try:
            if self._gathered is not None and any(g.measured for g in self._gathered.values()):
                self._flush(self._clock.step_index)  # the step the block ended in, as far as it ran
        finally:
            self._hooks.remove()
            self._step_eager.close()
            self._gathered = None
            if self._board is not None:
                self._board.close()

    def _finish(self, exc: BaseException | None) -> None:
        if self._store is not None:
            ended = "normally" if exc is None else f"by {type(exc).__name__}"
            self._write(status="complete", ended=ended)

    def step(self) -> int:
        """End the current training step; returns the index of the next. Optional with an optimizer."""
        return self._clock.step()

    @property
    def steps(self) -> int:
        """Steps ended so far."""
        return self._clock.step_index

    def history(self, name: str) -> History:
        """The rows logged for the module ``name`` (one per logged step, ``COLUMNS``)."""
        if name not in self._rows:
            raise NotCapturedError(
                f"{name!r} is not watched ({len(self._rows)} modules{closest(str(name), self._rows)}); "
                "list them with w.histories()"
            )
        rows = torch.tensor(self._rows[name], dtype=torch.float64).reshape(-1, len(COLUMNS))
        return History(name, type(dict(self.sites)[name]).__name__, rows)

    def histories(self) -> dict[str, History]:
        return {name: self.history(name) for name in self._rows}

    def table(self) -> str:
        """A row per watched module: its type, steps logged and its last logged row (text)."""
        return display.table_of(self)

    def plot(self, *, column: str = "grad_norm", log: bool | None = None) -> Image:
        """``column`` over the logged steps, a line per module: the training report's chart (a PIL image)."""
        image: Image = display.plot_of(self, column=column, log=log)
        return image

    def __repr__(self) -> str:
        return (f"<Watch of {type(self.model).__name__}: {len(self.sites)} modules, {self.steps} steps, "
                f"every {self.every}, {len(self.alerts)} alerts>")  # fmt: skip

    # -- logged steps -----------------------------------------------------------------------
    def _arm(self) -> None:
        """Hooks on every site for the step about to run, if it is one that is logged."""
        if self._clock.step_index % self.every:
            return
        self._gathered = {name: Gathered() for name, _ in self.sites}
        if is_compiled(self.model):  # hooks added after torch.compile fire only in eager code
            self._step_eager.enter_context(run_eagerly())
        for name, module in self.sites:
            self._hooks.on_forward(module, self._forward_hook(name))

    def _forward_hook(self, name: str) -> Any:
        keep = self._board is not None

        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if not torch.is_grad_enabled() or self._gathered is None:  # an evaluation pass
                return
            if not call_phase().carries_grad:  # checkpointing's rerun of a call already counted (core.phase)
                return
            self._clock.touch()
            x = next((t for t in _tensors(output) if t.is_floating_point()), None)
            if x is None:
                return
            if name not in self._sharded:  # once per site: is its output a tensor-parallel piece
                self._sharded.add(name)
                if note := shard_note(name, module, x, self._ranks.rank):
                    warnings.warn(f"hookscope.train.watch: {note}; its statistics are merged over the ranks",
                                  CaptureWarning, stacklevel=2)  # fmt: skip
            gathered = self._gathered[name]
            gathered.add_output(local(x), unit_dim(module, x), keep=keep)
            if x.requires_grad:
                self._hooks.on_grad(x, lambda grad: gathered.add_grad_output(grad, keep=keep))

        return hook

    def _pre(self, optimizer: Optimizer) -> None:
        if self._gathered is None:
            return
        for p in (p for group in optimizer.param_groups for p in group["params"]):
            site = self._owner.get(id(p))
            if site is not None:
                self._before[id(p)] = p.detach().clone()
        self._read_grads(optimizer, self._gathered)

    def _post(self, optimizer: Optimizer) -> None:
        if self._gathered is None:
            return
        by_site: dict[str, tuple[list[Tensor], list[Tensor]]] = {}  # site -> (updates, weights before)
        for p in (p for group in optimizer.param_groups for p in group["params"]):
            before, site = self._before.pop(id(p), None), self._owner.get(id(p))
            if before is not None and site is not None:
                updates, weights = by_site.setdefault(site, ([], []))
                updates.append(p.detach() - before)
                weights.append(before)
        for site, (updates, weights) in by_site.items():
            g = self._gathered[site]
            delta, old = self._ranks.share(updates), self._ranks.share(weights)
            assert delta is not None  # both lists hold a tensor
            assert old is not None
            g.delta_sq = delta if g.delta_sq is None else g.delta_sq + delta
            g.before_sq = old if g.before_sq is None else g.before_sq + old

    def _read_grads(self, optimizer: Optimizer | None, gathered: dict[str, Gathered]) -> None:
        """The parameter gradients of the sites that ``optimizer`` steps, or (None) of those still without."""
        chosen = None if optimizer is None else {id(p) for group in optimizer.param_groups for p in group["params"]}
        for site, g in gathered.items():
            if optimizer is None and g.grad_sq is not None:
                continue
            named = [
                (n, p)
                for n, p in _named(site, self.sites)
                if p.grad is not None and (chosen is None or id(p) in chosen)
            ]
            part = self._ranks.share(p.grad for _, p in named if p.grad is not None)
            if part is None:
                continue
            g.grad_sq = part if g.grad_sq is None else g.grad_sq + part
            if self._board is not None:
                g.grads.update({n: p.grad.detach().clone() for n, p in named if p.grad is not None})

    def _ended(self, step: int) -> None:
        if self._gathered is not None:
            self._flush(step)
        self._arm()

    def _flush(self, step: int) -> None:
        """The step's sums to the host in one transfer, then its rows, alerts, TensorBoard and store."""
        gathered, self._gathered = self._gathered, None
        self._hooks.remove()
        self._step_eager.close()
        self._before.clear()
        assert gathered is not None
        self._read_grads(None, gathered)  # the sites no optimizer stepped (all of them without one)
        device = _device(self.model)
        vectors = [self._vector(name, g, device) for name, g in gathered.items()]
        tables = [t.cpu().tolist() for t in self._ranks.gather(torch.stack(vectors))] if vectors else []  # the sync
        self._rank_rows.add(step, list(gathered), tables)
        merged = [merge([t[i] for t in tables]) for i in range(len(vectors))]
        for (name, g), slots in zip(gathered.items(), merged, strict=True):
            row = host_row(step, slots)
            self._rows[name].append([row[c] for c in COLUMNS])
            new = self._detector.check(step, name, row, measured(g, bool(self._params[name])))
            self.alerts.extend(new)
            if self._board is not None:
                self._board.log(step, name, row, g, dict(_named(name, self.sites)))
        if self._store is not None and time.monotonic() - self._store.written > self._flush_every:
            self._write(status="running", ended="")

    def _vector(self, name: str, g: Gathered, device: torch.device) -> Tensor:
        if g.alive is not None:
            window = self._alive[name]
            if window and window[-1].shape != g.alive.shape:
                window.clear()
            window.append(g.alive)
        dead = dead_fraction(self._alive[name]) if g.alive is not None else None
        weight_sq = self._ranks.share(self._params[name])
        return g.values(weight_sq, dead, device)

    # -- the store --------------------------------------------------------------------------
    def _open_store(self) -> None:
        assert self._store is not None
        if self._ranks.rank:
            return  # rank 0 writes the store, with every rank's rows (each rank has them all)
        sites = [{"name": n, "type": type(m).__name__, "kinds": [], "params": [p for p, _ in m.named_parameters()]}
                 for n, m in self.sites]  # fmt: skip
        config = {
            "source": SOURCE,
            "every": self.every,
            "select": selector_text(self._select),
            "thresholds": {**vars(self.thresholds), "update_ratio": list(self.thresholds.update_ratio)},
            "world_size": self._ranks.size,
        }
        self._store.open(self.model, config, sites)
        self._write(status="running", ended="")

    def _write(self, *, status: str, ended: str) -> None:
        assert self._store is not None
        if self._ranks.rank:
            return
        extra = {"steps": self.steps, "ended": ended}
        self._store.write(self.histories(), self.alerts, status=status, extra=extra, ranks=self._rank_rows.histories())


def _tensors(value: Any) -> Iterable[Tensor]:
    """The tensors of a module's output: itself, or those inside a tuple, list or dict (one level)."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, Tensor)]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, Tensor)]
    return [v for v in vars(value).values() if isinstance(v, Tensor)] if hasattr(value, "__dict__") else []


def _named(site: str, sites: list[tuple[str, nn.Module]]) -> list[tuple[str, Tensor]]:
    return list(dict(sites)[site].named_parameters())


def _device(model: nn.Module) -> torch.device:
    with contextlib.suppress(StopIteration):
        return next(model.parameters()).device
    return torch.device("cpu")


def _watch_table(w: Watch) -> str:
    return histories_table(w.histories())


def _watch_plot(w: Watch, *, column: str = "grad_norm", log: bool | None = None) -> Image:
    return series_plot(w.histories(), column=column, log=log)


@display.shows_as(Watch, table=_watch_table, plot=_watch_plot)
def _watch_html(w: Watch) -> str:
    return watch_html(w.histories(), w.alerts, steps=w.steps, every=w.every)
