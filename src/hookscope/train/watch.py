"""Watch a model while it trains: ``watch(model, optimizer, every=50) -> Watch``, a context manager.

::

    with hookscope.watch(model, optimizer=opt, every=50, out="runs/exp1.hookscope") as w:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
            w.step()                       # optional when an optimizer is given (steps.StepClock)
    w.history("conv2")["grad_norm"]        # one value per logged step
    w.alerts                               # vanishing / exploding gradients, dead units, update ratio, NaN

What is watched (``hookscope.store.series.COLUMNS``): per selected module (by default every
module holding parameters and every activation module, ``nn.ReLU`` and its kin: ``train.sites``)
the mean, std, mean |x| and zero fraction of its output, the fraction of dead units, the norm of
the output gradient, of the parameter gradients (as the optimizer sees them, after accumulation),
of the weights, and the update ratio |Δw| / |w| of the optimizer step (its pre- and post-step
hooks; undefined, not an alert, when the weights' norm was zero: ``train.collect``).

Cost: only steps ``0, every, 2 * every, ...`` are logged, and the module hooks exist only while a
logged step runs (registered when the step before it ends, removed when it ends), so the other
steps run the bare model, with nothing but the optimizers' step hooks and one pre-hook on the model
(the step its last training forward pass ran in, for ``w.log``), which return at once. A
logged step computes its statistics where the tensors are and brings them to the host once, when
it ends. Forward passes under ``torch.no_grad()`` (evaluation) are ignored. Watching changes
nothing of the training: no value, no flag, no random number. A ``torch.compile``d model runs its
compiled code on the steps not logged and eagerly on logged steps (``core.compiled.run_eagerly``);
so does a ``torch.compile``d train-step function, whose graphs Dynamo splits at the watch's hooks
without tracing into them (``core.compiled.out_of_trace``: no recompilation per step).

Under torchrun (DDP, FSDP2, tensor parallelism: ``train.ranks``) every rank must open the watch:
DTensors are measured on their local pieces, a logged step gathers every rank's sums in one
collective and every rank logs the merged, global rows; rank 0 writes ``out`` and TensorBoard.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torch import nn
from torch.optim import Optimizer

from ..base import display
from ..base.deprecation import warn_renamed
from ..core.block import Block
from ..core.compiled import out_of_trace
from ..core.hooks import HandleGroup
from ..core.placement import refuse_zero3
from ..core.scripted import hookable
from ..core.select import Selector, select_modules, selector_text
from ..errors import CaptureWarning, NonFiniteError, OptionError
from ..store.format import FLUSH_EVERY, check_flush_every
from ..store.history import Alert
from ..store.series import SOURCE
from .alert_bundle import AlertEvidence, evidence_of
from .alerts import Detector, Thresholds, thresholds_of
from .board import Board
from .deepspeed_reads import ZeroReads, is_engine, zero_of
from .expert_rows import FUSED_NOTE, ExpertRows
from .logged import Logged
from .measures import DeadWindows
from .optimizer_reads import OptimizerReads
from .rank_sums import RankRows, Ranks
from .scalars import Scalars
from .scaler import LossScale
from .sinks import Sink, close_all, open_sinks, parse, send
from .sites import default_sites
from .step_hooks import StepHooks
from .steps import StepClock, optimizers_of
from .views import histories_table, series_plot, watch_html
from .watch_store import WatchStore

if TYPE_CHECKING:
    from PIL.Image import Image


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
    flush_every: float | None = FLUSH_EVERY,
    sinks: Sequence[Any] | None = None,
    scaler: Any = None,
    evidence: str | os.PathLike[str] | None = None,
) -> Watch:
    """A ``Watch`` of ``model``'s training (see the module docstring), to use as ``with watch(...) as w``.

    ``optimizer``: one or several; their step hooks measure the update ratio and, until ``w.step()``
    is first called, count the steps. ``select``: any selector (default: the modules holding parameters
    and the activation modules). ``out``: a store written when the block ends and while it runs, refused if it
    exists unless ``force``. ``flush_every``: the rule of ``extract`` too (``store.format.FLUSH_EVERY``,
    5 s): a logged step is on disk within ``flush_every`` seconds, or at the end of the first step after
    them (the store is rewritten whole, at most once per ``flush_every``); None: only when the block ends.
    ``sinks``: trackers that get the statistics, the scalars of ``w.log`` and the alerts (``train.sinks``;
    ``"tensorboard:DIR"``: a ``SummaryWriter`` with scalars per module and histograms of outputs,
    gradients and weights). ``tensorboard=DIR`` is the deprecated spelling of ``sinks=["tensorboard:DIR"]``.
    ``scaler``: the ``torch.amp.GradScaler`` of the loop, for true gradient norms and skipped steps
    counted as skipped (``train.scaler``). A DeepSpeed engine (ZeRO stage 0, 1 or 2) is watched as the
    model, with its own optimizer unless one is given and its own loss scale, whose skipped steps are
    counted as skipped (``train.deepspeed_reads``). Every parameter is
    watched once, at the module that holds it (``train.sites``; the model itself is the site ``""``,
    shown as ``(model)``); ``w.frozen`` names the sites whose parameters are all frozen
    (``requires_grad=False``: a LoRA's base layers), which have no gradient norm or update ratio and
    show ``frozen`` in ``w.table()``.

    Args:
        model: the network being trained.
        optimizer: one optimizer or several; None counts steps only through ``w.step()`` (a DeepSpeed engine: its own).
        every: log one step in this many (1: every step).
        select: the modules watched; None takes the modules holding parameters and the activation modules.
        out: a store folder written while the block runs and when it ends; None writes none.
        tensorboard: deprecated: a TensorBoard log folder, as ``sinks=["tensorboard:DIR"]`` (warns).
        thresholds: the alert bounds: a ``Thresholds``, a dict of the fields to change, or None for the defaults.
        force: replace an existing ``out`` that hookscope wrote (never a folder holding other files).
        flush_every: seconds within which a logged step is on disk in ``out``; None writes only when the block ends.
        sinks: trackers as ``"KIND:WHERE"`` (``"tensorboard:runs/tb"``, ``"wandb:offline"``) or objects with
            ``scalars``, ``alert`` and ``close``; None sends nowhere.
        scaler: the loop's ``torch.amp.GradScaler``; None when there is none (a DeepSpeed engine: its own loss scale).
        evidence: a folder for the evidence bundle of the first alert (``hookscope.train.alert_bundle``); None
            writes none.

    Returns:
        A ``Watch`` block; its hooks are in place inside ``with`` and gone after it.

    Raises:
        OptionError: ``every`` below 1, unknown ``thresholds`` fields or bad bounds, an unknown sink, a
            bad ``flush_every``, a model sharded by DeepSpeed ZeRO-3, or a DeepSpeed optimizer other than
            ZeRO stage 1 and 2's (``train.deepspeed_reads``).
        OutputExistsError: ``out`` exists and ``force`` is False, or it holds files hookscope did not write;
            ``evidence`` exists.
        SelectionError: ``select`` matches no module.
    """
    if not isinstance(every, int) or every < 1:
        raise OptionError(f"every= is the number of steps between logged steps, at least 1; got {every!r}")
    check_flush_every(flush_every)
    specs = parse(sinks)
    if tensorboard is not None:  # the old spelling of a TensorBoard sink, for one release
        warn_renamed("watch(tensorboard=DIR)", 'watch(sinks=["tensorboard:DIR"])')
        specs.append(("tensorboard", os.fspath(tensorboard)))
    refuse_zero3(model, "watch")
    if optimizer is None and is_engine(model):  # a DeepSpeed engine steps its own optimizer (train.deepspeed_reads)
        optimizer = getattr(model, "optimizer", None)
    zero = zero_of(model, optimizer)  # before the optimizers are unwrapped: DeepSpeed's own, or refused by name
    found = Watch(model, optimizers_of(optimizer), every=every, select=select, out=out, sinks=specs,
                  thresholds=thresholds_of(thresholds), force=force, flush_every=flush_every,
                  scaler=LossScale(model if scaler is None and is_engine(model) else scaler), zero=zero)  # fmt: skip
    found.evidence = evidence_of(evidence, None, "watch")
    return found


class Watch(Block, Logged, display.Shows):
    """A training run being watched; ``step()``, ``history(name)`` and ``alerts`` (see ``watch``).

    Its block (``core.block``) holds the optimizers' step hooks for the whole block; the module
    hooks of a logged step are its ``StepHooks``, removed when the step ends and at exit.

    Built by ``hookscope.watch``, which validates the options.

    Args:
        model: the network being trained.
        optimizer: the optimizers whose steps are hooked (a list, may be empty).
        every: log one step in this many.
        select: the modules watched; None takes the default sites.
        out: the store folder written while the block runs and at its end; None for none.
        sinks: ``(kind, where)`` pairs of the trackers that get the statistics.
        thresholds: the alert bounds.
        force: replace an existing ``out`` that hookscope wrote.
        flush_every: seconds within which a logged step is on disk; None writes at the end only.
        scaler: the loss scale of the loop's GradScaler (``hookscope.train.scaler``).
        zero: DeepSpeed's ZeRO optimizer (stages 1, 2) whose partitions hold the gradients, or None.

    Raises:
        OptionError: a model sharded by DeepSpeed ZeRO-3.
        OutputExistsError: ``out`` exists and ``force`` is False, or it holds files hookscope did not write.
        SelectionError: ``select`` matches no module.
    """

    noun, remake = "watch", "hookscope.watch(...)"

    def __init__(self, model: nn.Module, optimizer: list[Optimizer], *, every: int, select: Selector | None,
                 out: str | os.PathLike[str] | None, sinks: list[tuple[str, Any]], thresholds: Thresholds,
                 force: bool, flush_every: float | None, scaler: LossScale, zero: Any = None) -> None:  # fmt: skip
        super().__init__()  # no stance for the whole block: a compiled model runs eagerly on logged steps only
        refuse_zero3(model, "watch")
        self.model, self.every, self.thresholds = model, every, thresholds
        self.sites = hookable(model, default_sites(model) if select is None else select_modules(model, select), select,
                              "watch")  # fmt: skip
        self.alerts: list[Alert] = []
        self._store = None if out is None else WatchStore(out, force=force)
        self.out = None if self._store is None else self._store.out
        self._select, self._flush_every, self._sink_specs, self._scale = select, flush_every, sinks, scaler
        self.skipped: list[int] = []  # the step index at each step the GradScaler skipped (train.scaler)
        self._scalars = Scalars()
        self._forward_step: int | None = None  # the step of the last forward pass with grad (w.log's default)
        self._sinks: list[Sink] = []
        self._unwritten = False  # rows logged since the store was last written
        # gradients and updates around an optimizer step; DeepSpeed's in its partitions (train.deepspeed_reads)
        self._reads = OptimizerReads(self.sites) if zero is None else ZeroReads(self.sites, zero)
        self._params = {name: [p for _, p in pairs] for name, pairs in self._reads.owned.items()}  # each once
        # the sites whose every parameter is frozen when the watch is made (a LoRA's base layers): no gradient
        self.frozen = [name for name, ps in self._params.items() if ps and not any(p.requires_grad for p in ps)]
        self._rows: dict[str, list[list[float]]] = {name: [] for name, _ in self.sites}
        self._undefined: dict[str, dict[str, list[int]]] = {}  # site -> column -> steps (collect.undefined)
        self._dead = DeadWindows(self._rows, thresholds.dead_window)  # each site's alive masks
        self._experts = ExpertRows(model, self.sites)  # a row per fused expert, routing scalars (train.expert_rows)
        self._rows.update({name: [] for name in self._experts.names})
        if self._experts.units:
            warnings.warn(f"hookscope.watch: {self._experts.note} {FUSED_NOTE}", CaptureWarning, stacklevel=3)
        self._clock = StepClock(
            optimizer,
            on_end=self._ended,
            on_pre_optimizer=self._pre,
            on_post_optimizer=self._post,
            ends_step=self._reads.ends_step if isinstance(self._reads, ZeroReads) else None,
        )
        self._step = StepHooks(model, self.sites, self._clock.touch)  # the module hooks of a logged step
        self._detector = Detector(thresholds)
        self._boards: list[Board] = []  # the TensorBoard sinks, which draw histograms too
        self._ranks = Ranks()  # the world, known when the block is entered (train.ranks)
        self._rank_rows = RankRows({}, 1)  # each rank's own rows, under torchrun
        self.evidence: AlertEvidence | None = None  # watch(evidence=DIR): the bundle of the first alert

    # -- the block (core.block: entered once; a failed entry leaves no hook, no store) -----------
    def _install(self, handles: HandleGroup) -> None:
        self._ranks = Ranks.current()
        self._rank_rows = RankRows({n: type(m).__name__ for n, m in self.sites}, self._ranks.size)
        if self._store is not None:
            self._store.check()  # before anything is touched, on every rank
            self._ranks.barrier()  # then rank 0 creates it: no rank sees it half made
        self._clock.install(handles)
        handles.on_forward_pre(self.model, out_of_trace(self._look))  # kept out of a compiled step's trace
        # under torchrun rank 0 alone writes to the sinks: every rank logs the same merged rows
        self._sinks = open_sinks(self._sink_specs, name=type(self.model).__name__) if not self._ranks.rank else []
        self._boards = [s for s in self._sinks if isinstance(s, Board)]
        self._arm()  # TorchScript sites were left out when the sites were chosen (core.scripted)
        if self._store is not None:
            self._open_store()  # last: a failed entry writes no store

    def _release(self) -> None:
        try:
            self._look_skipped()  # the last step was skipped by the scaler: what it gathered is dropped
            if self._step.gathered is not None and any(g.measured for g in self._step.gathered.values()):
                self._flush(self._clock.step_index)  # the step the block ended in, as far as it ran
        finally:
            self._step.disarm()
            self._experts.disarm()
            try:
                send(self._sinks, self._scalars.settle())
            finally:
                close_all(self._sinks)

    def _finish(self, exc: BaseException | None) -> None:
        if self._store is not None:
            ended = "normally" if exc is None else f"by {type(exc).__name__}"
            stopped = exc if isinstance(exc, NonFiniteError) else None  # nan_guard's finding: kept in the store
            self._write(status="complete", ended=ended, non_finite=stopped)

    def step(self) -> int:
        """End the current training step; returns the index of the next. Optional with an optimizer.

        Returns:
            The index of the next step (the same one when the GradScaler skipped this step).
        """
        if self._look_skipped():
            return self._clock.step_index  # the scaler skipped the step: it is run again
        return self._clock.step()

    def log(self, *, step: int | None = None, **scalars: object) -> None:
        """Record ``scalars`` (numbers, or tensors of one element, read later) for ``step``.

        They are kept beside the statistics (the store's ``scalars``, ``run.scalars()``, the report's
        loss curve) and sent to the sinks. By default they belong to the step of the model's last
        training forward pass: a loss logged after ``opt.step()`` (which ends the step) lands on the
        step that computed it, as does anything logged before the next step's forward pass.

        Args:
            step: the step the scalars belong to; None is the step of the last forward pass with
                grad (``w.steps`` before the first one).
            **scalars: name -> a number or a one-element tensor (``loss=loss``, ``lr=lr``).
        """
        if step is None:
            step = self._clock.step_index if self._forward_step is None else self._forward_step
        self._scalars.add(step, **scalars)

    @property
    def steps(self) -> int:
        """Steps ended so far."""
        return self._clock.step_index

    def __repr__(self) -> str:
        return (f"<Watch of {type(self.model).__name__}: {len(self.sites)} modules, {self.steps} steps, "
                f"every {self.every}, {len(self.alerts)} alerts>")  # fmt: skip

    # -- the end of a step (the logged steps: train.logged) ------------------------------------
    def _ended(self, step: int) -> None:
        if self._step.gathered is not None:
            self._flush(step)
        self._arm()
        store, every = self._store, self._flush_every
        if store is not None and every is not None and self._unwritten and time.monotonic() - store.written > every:
            self._write(status="running", ended="")  # checked at every step: on disk within flush_every

    # -- the store --------------------------------------------------------------------------
    def _open_store(self) -> None:
        assert self._store is not None
        if self._ranks.rank:
            return  # rank 0 writes the store, with every rank's rows (each rank has them all)
        config = {
            "source": SOURCE,
            "every": self.every,
            "select": selector_text(self._select),
            "thresholds": {**vars(self.thresholds), "update_ratio": list(self.thresholds.update_ratio)},
            "world_size": self._ranks.size,
        }
        self._store.open(self.model, config, self.sites, dict.fromkeys(self._experts.names, self._experts.type))
        self._write(status="running", ended="")

    def _write(self, *, status: str, ended: str, non_finite: NonFiniteError | None = None) -> None:
        assert self._store is not None
        if self._ranks.rank:
            return
        self._unwritten = False
        extra = {"steps": self.steps, "ended": ended, "skipped": self.skipped, "frozen": self.frozen}
        self._store.write(self.histories(), self.alerts, status=status, extra=extra,
                          ranks=self._rank_rows.histories(), scalars=self._scalars.rows(),
                          non_finite=non_finite)  # fmt: skip


def _watch_table(w: Watch) -> str:
    return histories_table(w.histories(), frozen=w.frozen)


def _watch_plot(w: Watch, *, column: str = "grad_norm", log: bool | None = None) -> Image:
    return series_plot(w.histories(), column=column, log=log)


@display.shows_as(Watch, table=_watch_table, plot=_watch_plot)
def _watch_html(w: Watch) -> str:
    return watch_html(w.histories(), w.alerts, steps=w.steps, every=w.every)
