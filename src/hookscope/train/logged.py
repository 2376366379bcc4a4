"""What a watch logged, and how it is read: ``Logged``, the reading side of ``train.watch.Watch``.

Each watched site (and each fused expert, ``train.expert_rows``) has a list of rows, one per logged
step, the ``store.series.COLUMNS`` statistics in order; a column without a value at a step (the
update ratio of weights whose norm was zero: ``train.collect.undefined``) is NaN in the row and
marked undefined. ``history(name)`` reads one site's rows as a ``History``, ``histories()`` all of
them; ``table()`` and ``plot()`` are the faces registered for ``Watch`` (``train.views``).
A logged step (``_arm``: the step about to run is one in ``every``) has ``train.step_hooks``'
module hooks; around its optimizer steps the gradients, the weights' copies and the update are
read (``train.optimizer_reads``); when it ends, ``_flush`` brings every site's sums to the host in
one transfer and turns them into rows, undefined marks, alerts, TensorBoard histograms and scalars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from ..base import display
from ..base.words import closest
from ..core.compiled import EagerNames, known_name
from ..errors import NotCapturedError
from ..store.history import COLUMNS, Alert, History
from .alert_bundle import AlertEvidence
from .alerts import Detector
from .board import Board
from .collect import Gathered, host_row, measured, undefined
from .expert_rows import ExpertRows
from .measures import DeadWindows
from .optimizer_reads import OptimizerReads
from .rank_sums import RankRows, Ranks, merge
from .scalars import Scalars, merged
from .scaler import LossScale, fused_scale, unscaled
from .sinks import Sink, send
from .sites import model_device, shown
from .step_hooks import StepHooks
from .steps import StepClock

if TYPE_CHECKING:
    from PIL.Image import Image


class Logged:
    """A watch's logged steps and the rows they left per site (``_rows``), read as ``History`` objects.

    The state is ``train.watch.Watch``'s, made in its ``__init__``.
    """

    model: nn.Module
    sites: list[tuple[str, nn.Module]]
    every: int
    alerts: list[Alert]
    skipped: list[int]
    evidence: AlertEvidence | None
    _rows: dict[str, list[list[float]]]
    _undefined: dict[str, dict[str, list[int]]]  # site -> column -> steps (collect.undefined)
    _experts: ExpertRows
    _clock: StepClock
    _step: StepHooks
    _ranks: Ranks
    _rank_rows: RankRows
    _boards: list[Board]
    _scale: LossScale
    _scalars: Scalars
    _reads: OptimizerReads
    _params: dict[str, list[Tensor]]
    _dead: DeadWindows
    _detector: Detector
    _sinks: list[Sink]
    _forward_step: int | None
    _unwritten: bool

    # -- a logged step: hooks armed, the optimizer's reads, its sums brought to the host -------
    def _arm(self) -> None:
        """Hooks on every site for the step about to run, if it is one that is logged."""
        if not self._clock.step_index % self.every:
            self._step.arm(keep=bool(self._boards), rank=self._ranks.rank)
            self._experts.arm()

    def _look(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        if torch.is_grad_enabled():  # a training forward pass (evaluation runs without grad)
            self._look_skipped()
            self._forward_step = self._clock.step_index

    def _look_skipped(self) -> bool:
        """The scaler skipped the last step: count it and drop what a logged step gathered of it."""
        if not self._scale.look():
            return False
        self.skipped.append(self._clock.step_index)
        self._scalars.add(self._clock.step_index, skipped_steps=len(self.skipped))
        if self._step.gathered is not None:
            self._step.restart()
            self._reads.before.clear()
        return True

    def _pre(self, optimizer: Optimizer) -> None:
        if (gathered := self._step.gathered) is None:
            return
        self._reads.keep_weights(optimizer)
        self._experts.grads()  # each expert's slice of the fused gradients, as the optimizer sees them
        if not self._clock.closure:  # a closure's backward runs inside step(): read in _post (Lightning)
            self._read_grads(optimizer, gathered, fused_scale(optimizer))

    def _post(self, optimizer: Optimizer) -> None:
        if (gathered := self._step.gathered) is None:
            return
        if self._clock.closure:
            self._read_grads(optimizer, gathered, fused_scale(optimizer))
        self._experts.updates(self._reads.before)
        self._reads.updates(optimizer, gathered, self._ranks)

    def _read_grads(
        self, optimizer: Optimizer | None, gathered: dict[str, Gathered], scale: Tensor | None = None
    ) -> None:
        self._reads.grads(optimizer, gathered, self._ranks, scale=scale, keep=bool(self._boards))

    def _flush(self, step: int) -> None:
        """The step's sums to the host in one transfer, then its rows, alerts, TensorBoard and store."""
        gathered = self._step.disarm()
        self._experts.disarm()
        self._reads.before.clear()
        assert gathered is not None
        self._read_grads(None, gathered)  # the sites no optimizer stepped (all of them without one)
        device = model_device(self.model)
        vectors = [self._vector(name, g, device) for name, g in gathered.items()]
        tables = [t.cpu().tolist() for t in self._ranks.gather(torch.stack(vectors))] if vectors else []  # the sync
        self._rank_rows.add(step, list(gathered), tables)
        rows = [merge([t[i] for t in tables]) for i in range(len(vectors))]
        owns = {name: bool(ps) for name, ps in self._params.items()}
        by_site, alerts = self._log_rows(step, gathered, rows, self._scale.scale, self._detector, owns)
        logged = {f"{shown(name)}/{c}": v for name, row in by_site.items() for c, v in row.items() if c != "step"}
        for board in self._boards:
            for name, g in gathered.items():
                board.histograms(step, shown(name), g, dict(self._reads.named(name)))
        for name, expert_row in self._experts.rows(step).items():
            self._rows[name].append(expert_row)
        self._scalars.add(step, **self._experts.scalars())
        self.alerts.extend(alerts)
        if alerts and self.evidence is not None and not self._ranks.rank:  # rank 0 has every rank's merged rows
            self.evidence.write_alert(alerts[0], self, self._clock.optimizers)
        if self._scale.scaler is not None:
            self._scalars.add(step, loss_scale=self._scale.scale)
        send(self._sinks, merged(self._scalars.settle(), {step: logged}), alerts)
        self._unwritten = True

    def _vector(self, name: str, g: Gathered, device: torch.device) -> Tensor:
        dead = self._dead.fraction(name, g.alive)
        weight_sq = self._reads.weight_sq(self._params[name], self._ranks)
        return g.values(weight_sq, dead, device)

    # -- reading what was logged ----------------------------------------------------------------
    def history(self, name: str) -> History:
        """The rows logged for the module ``name`` (one per logged step, ``COLUMNS``).

        Args:
            name: a watched module's dotted name (with or without a wrapper's ``module.``; the model itself:
                ``""`` or ``"(model)"``).

        Returns:
            Its ``History``, one row per logged step, the ``COLUMNS`` statistics.

        Raises:
            NotCapturedError: ``name`` is not watched (the message names the closest ones).
        """
        # "module.0" of a DDP / DataParallel / DeepSpeed model is "0"; the model itself is "" or "(model)"
        name = "" if name == shown("") and "" in self._rows else known_name(name, self._rows)
        if name not in self._rows:
            raise NotCapturedError(
                f"{name!r} is not watched ({len(self._rows)} modules{closest(str(name), self._rows)}); "
                "list them with w.histories()"
            )
        rows = torch.tensor(self._rows[name], dtype=torch.float64).reshape(-1, len(COLUMNS))
        kind = self._experts.type if name in self._experts.names else type(dict(self.sites)[name]).__name__
        return History(name, kind, rows, self._undefined.get(name))

    def histories(self) -> dict[str, History]:
        """Every watched module's rows (one per logged step), in model order.

        Returns:
            Module name -> its ``History``.
        """
        return EagerNames({name: self.history(name) for name in self._rows})  # "module.0" of a DDP model finds "0"

    def table(self) -> str:
        """A row per watched module: its type, steps logged and its last logged row (text).

        Returns:
            The table, as text.
        """
        return display.table_of(self)

    def plot(self, *, column: str = "grad_norm", log: bool | None = None) -> Image:
        """``column`` over the logged steps, a line per module: the training report's chart (a PIL image).

        Args:
            column: the statistic drawn (default ``grad_norm``).
            log: a log scale for the values; None decides from the column and its range.

        Returns:
            A PIL image of the chart.

        Raises:
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        image: Image = display.plot_of(self, column=column, log=log)
        return image

    def _log_rows(
        self, step: int, gathered: dict[str, Gathered], rows: list[list[float]], scale: float, detector: Detector,
        owns_params: dict[str, bool],
    ) -> tuple[dict[str, dict[str, float]], list[Alert]]:  # fmt: skip
        """A logged step's rows (``rows``: each site's ``SLOTS`` on the host, in ``gathered``'s order) kept;
        returns each site's row by column and the alerts the rows raise."""
        logged: dict[str, dict[str, float]] = {}
        alerts: list[Alert] = []
        for (name, g), slots in zip(gathered.items(), rows, strict=True):
            row, blank = unscaled(host_row(step, slots), scale), undefined(slots)
            self._rows[name].append([row[c] for c in COLUMNS])
            for column in blank:  # undefined, not faulty: no alert
                self._undefined.setdefault(name, {}).setdefault(column, []).append(step)
            alerts += detector.check(step, name, row, measured(g, owns_params[name]) - blank)
            logged[name] = row
        return logged, alerts
