"""What a ``nan_guard`` does with what it reads: ``Verdicts``, the judging side of ``train.guard.Guard``.

A call's tensors become checks (``train.readings``), judged at once (``sync="call"``) or when the
pass's numbers are read (``sync="pass"``) by the producer rule (``train.producer``). A finding is
raised (``mode="raise"``) or warned once per (phase, module, kind) (``mode="warn"``); with a
``GradScaler`` a backward finding is held until the step, and dropped when the scaler skipped it
(``guard.skipped_steps``); under torchrun the ranks agree on it first (``train.lockstep``); with
``evidence=`` the first one is bundled (``train.alert_bundle``). Around each optimizer step the
parameters it reads and writes are checked (``train.params``).

The state is ``train.guard.Guard``'s, made in its ``__init__``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from torch import nn
from torch.optim import Optimizer

from ..core.tree import Leaves
from ..errors import NonFiniteError, NonFiniteWarning
from . import finite, params
from .alert_bundle import AlertEvidence, ranges_of
from .lockstep import Lockstep
from .producer import Check, Finding, Judge, Site, error, hint
from .readings import Readings
from .steps import StepClock


class Verdicts:
    """The checks of a ``nan_guard`` block's calls and steps, judged, and its findings raised or warned."""

    model: nn.Module
    mode: str
    sync: str
    findings: list[NonFiniteError]
    skipped_steps: int
    evidence: AlertEvidence | None
    _by_name: dict[str, nn.Module]
    _clock: StepClock
    _step_checks: dict[int, params.StepCheck]
    _scaler: Any
    _scale: float
    _judge: Judge
    _readings: Readings
    _events: list[tuple[str, Site, list[Check]]]
    _held: list[NonFiniteError]
    _warned: set[tuple[str, str, str]]
    _lockstep: Lockstep

    if TYPE_CHECKING:

        @property
        def step_index(self) -> int: ...

    # -- checks and findings -----------------------------------------------------------------
    def _checks(self, leaves: Leaves) -> list[Check]:
        return [Check(key, self._readings.of(t)) for key, t in leaves if finite.checkable(t)]

    def _see(self, event: str, site: Site, checks: list[Check]) -> None:
        if self.sync == "pass":
            self._events.append((event, site, checks))
            return
        finding = self._judge.see(event, site, checks)
        if finding is not None:
            self._found(finding)

    def _read(self) -> None:
        """Read every number still on the device, then judge the events waiting for them."""
        self._readings.read()
        events, self._events = self._events, []
        for event, site, checks in events:
            finding = self._judge.see(event, site, checks)
            if finding is not None:
                self._found(finding)

    def _found(self, finding: Finding) -> None:
        scaled = self._scaler is not None
        err = error(finding, self.step_index, hint=hint(finding, self._by_name[finding.site.name], scaled=scaled))
        if self.evidence is not None:
            self.evidence.ranges[id(err)] = ranges_of(finding)
        if finding.phase == "backward" and self._scaler is not None:
            self._held.append(err)  # the scaler may skip this step: then it is no error
            return
        self._report(err)

    def _report(self, err: NonFiniteError) -> None:
        if self.mode == "raise":
            if self._lockstep.hold(err):
                return  # under torchrun: raised by every rank at the step's check point (``_agree``)
            self.findings.append(err)
            self._bundle(err)
            raise err
        where = (err.phase, err.module, err.kind)
        if where not in self._warned:
            self._warned.add(where)
            self.findings.append(err)
            self._bundle(err)
            warnings.warn(str(err), NonFiniteWarning, stacklevel=3)

    def _settle_held(self) -> None:
        """The scaler lowered its scale since the last look: it skipped a step, and what was held was its inf."""
        if self._scaler is None:
            return
        scale = float(self._scaler.get_scale())  # one host sync per forward pass, with a scaler only
        if scale < self._scale:
            self.skipped_steps += 1
            self._held.clear()
        self._scale = scale

    # -- the optimizer step ------------------------------------------------------------------
    def _pre_step(self, optimizer: Optimizer) -> None:
        self._read()
        held, self._held = self._held, []
        for err in held:  # the step runs although the backward pass broke: the scaler did not skip it
            self._report(err)
        bad = self._step_checks[id(optimizer)].before(optimizer)
        if bad is not None and not self._judge.tainted:
            self._judge.found.add("backward")
            self._report(params.gradient_error(bad[0], bad[1], optimizer, self.step_index, ""))
        self._agree()

    def _post_step(self, optimizer: Optimizer) -> None:
        err = self._step_checks[id(optimizer)].after(optimizer, self.step_index)
        if err is not None:
            self._report(err)
        self._agree()

    def _agree(self) -> None:
        """Under torchrun, raise what any rank found (``train.lockstep``); nothing in a world of one."""
        err = self._lockstep.agree()
        if err is not None:
            self.findings.append(err)
            self._bundle(err)
            raise err

    def _bundle(self, err: NonFiniteError) -> None:
        """With ``evidence=``: the bundle of the first finding (``train.alert_bundle``)."""
        if self.evidence is not None:
            self.evidence.write_finding(err, self.model, self._clock.optimizers)
