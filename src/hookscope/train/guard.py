"""``nan_guard``: the first NaN or infinity of a training run, named where it was produced.

::

    with hookscope.nan_guard(model, optimizer=opt) as guard:      # raises NonFiniteError
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()

Every checked module (default: all of them, the model included) gets a forward pre-hook and a
forward hook; the tensors they see that need a gradient get a tensor hook
(``hookscope.train.gradients``); each optimizer gets step pre- and post-hooks
(``hookscope.train.steps``). Every input, output and gradient is reduced at most once
(``hookscope.train.readings``): a tensor seen twice (a layer's output is the next one's input, a
block returns its last layer's output) is reduced once; the output of a module that keeps finite
values finite (ReLU6, a zero padding: ``finite.keeps_finite``) fed finite inputs is not reduced;
a gradient that is only a call's ``grad_output`` is reduced only if that call's ``grad_input``
breaks. The producer rule (``hookscope.train.producer``) names the call that made things worse,
never the calls downstream of it; the optimizer phase is ``hookscope.train.params``.
What is judged, and what becomes of a finding (raised, warned, held, agreed), is
``hookscope.train.verdicts``.

When the numbers are read (``sync``):

* ``"call"`` (the default on the CPU): at once, in the hook. On the CPU a read costs nothing
  more than the reduction, and the producer is examined while its tensors are alive (the exact
  count), and the error is raised from inside the forward or backward pass that made it.
* ``"pass"`` (the default when the model has a parameter on an accelerator): the two numbers
  stay on the device, and the guard reads all of them at once at the end of each outermost
  forward call, before each ``optimizer.step()``, at the next forward pass and at the end of
  the block: one host sync per pass instead of one per call, which would stall the GPU's queue.
  A finding of a backward pass is raised by the next of those (``optimizer.step()``). Tensors
  are held by weak references: the exact count is given when the tensor is still alive and
  unchanged, its level and max |x| always.

``allow=`` takes a selector (names, globs, types, a predicate ``(name, module) -> bool``) of the
modules whose outputs are meant to hold infinities (an attention mask's ``-inf``): they may
produce inf, never NaN, and what they feed is judged against their inf (``-inf`` that a softmax
turns into NaN on a fully masked row is still found). ``scaler=`` is the ``torch.amp.GradScaler``
the loop steps with: a backward finding is then held until the step, and when the scaler skips
``optimizer.step()`` (its step hooks never run) the inf was the mechanism working; it is counted
in ``guard.skipped_steps``, not reported.

The step is the optimizer's step count (``hookscope.train.steps.StepClock``; a skipped step is
not counted), or the caller's ``guard.step()`` calls; with neither, the forward passes of the
model under grad mode. Evaluation passes under ``torch.no_grad()`` are checked, not counted.

Under torchrun a guard with optimizers raises on every rank at once (``train.lockstep``): a
finding is held until the step's check point, where the ranks agree on the first one. DTensors
are checked on their local pieces, with no collective (``finite``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from functools import partial
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from ..core.block import Block
from ..core.compiled import Eagerly
from ..core.hooks import HandleGroup
from ..core.placement import refuse_zero3
from ..core.scripted import hookable
from ..core.select import Selector, select_modules
from ..core.tree import Leaves, flatten, flatten_call
from ..errors import NonFiniteError, OptionError
from . import finite, params
from .alert_bundle import AlertEvidence, evidence_of
from .gradients import Gradients
from .lockstep import Lockstep
from .producer import Check, Judge, Site, worst
from .readings import Readings
from .steps import StepClock, optimizers_of
from .verdicts import Verdicts

Mode = Literal["raise", "warn"]
Sync = Literal["call", "pass"]


def nan_guard(
    model: nn.Module,
    optimizer: Optimizer | Iterable[Optimizer] | None = None,
    *,
    mode: Mode = "raise",
    allow: Selector | None = None,
    select: Selector | None = None,
    scaler: Any = None,
    sync: Sync | None = None,
    evidence: str | os.PathLike[str] | None = None,
    factory: str | None = None,
) -> Guard:
    """Find the first NaN or infinity where it is born, inside a ``with`` block (see the module docstring).

    ``mode="raise"`` raises ``NonFiniteError`` at the first producer; ``mode="warn"`` warns once per
    producer (``NonFiniteWarning``) and goes on; both keep them in ``guard.findings``. ``select``: the
    modules checked (None, the default: every module); ``allow``: those whose non-finite values are expected.

    Args:
        model: the network checked.
        optimizer: one optimizer or several whose steps are checked too (the parameters they write).
        mode: ``raise`` (the default) or ``warn``.
        allow: the modules whose outputs may hold infinities (never NaN), e.g. an attention mask; None for none.
        select: the modules checked; None checks every module, the model included.
        scaler: the loop's ``torch.amp.GradScaler``: a step it skips is counted, not reported.
        sync: when the numbers are read: ``call`` (in each hook), ``pass`` (once per pass), or None
            (``call`` on the CPU, ``pass`` on an accelerator).
        evidence: a folder for the evidence bundle of the first finding (``hookscope.train.alert_bundle``); None
            writes none.
        factory: ``"module:function"`` returning the model, untrained: the bundle's ``reproduce.py`` rebuilds it.

    Returns:
        The guard block; ``guard.findings`` lists what it found.

    Raises:
        OptionError: an unknown ``mode`` or ``sync``, a ``scaler`` that is not a GradScaler, a ``factory`` not
            spelled ``module:function``, or a model sharded by DeepSpeed ZeRO-3.
        OutputExistsError: ``evidence`` names a folder that exists.
        SelectionError: ``select`` or ``allow`` matches no module.
        NonFiniteError: in the block, with ``mode="raise"``: a NaN or an infinity, named where it was produced.
    """
    guard = Guard(model, optimizer, mode=mode, allow=allow, select=select, scaler=scaler, sync=sync)
    guard.evidence = evidence_of(evidence, factory, "nan_guard", replay={"select": select, "allow": allow})
    return guard


def _every(name: str, module: nn.Module) -> bool:
    return True


class Guard(Verdicts, Block):
    """The hooks of one ``nan_guard`` block and what they found."""

    noun, remake = "nan_guard", "hookscope.nan_guard(...)"

    def __init__(
        self,
        model: nn.Module,
        optimizer: Optimizer | Iterable[Optimizer] | None,
        *,
        mode: Mode,
        allow: Selector | None,
        select: Selector | None,
        scaler: Any,
        sync: Sync | None,
    ) -> None:
        if mode not in ("raise", "warn"):
            raise OptionError(f"mode must be 'raise' or 'warn', got {mode!r}")
        if sync not in (None, "call", "pass"):
            raise OptionError(f"sync must be 'call' or 'pass' (or None: by device), got {sync!r}")
        if scaler is not None and not callable(getattr(scaler, "is_enabled", None)):
            raise OptionError(f"scaler= takes a torch.amp.GradScaler, got {type(scaler).__name__}")
        refuse_zero3(model, "nan_guard")
        self.model, self.mode = model, mode
        self.sync: Sync = sync or _default_sync(model)
        self._modules = hookable(
            model, select_modules(model, _every if select is None else select), select, "nan_guard"
        )
        self._by_name = dict(self._modules)
        self._allowed = {id(m) for _, m in select_modules(model, allow)} if allow is not None else set()
        optimizers = optimizers_of(optimizer)
        self._clock = StepClock(optimizers, on_pre_optimizer=self._pre_step, on_post_optimizer=self._post_step)
        names = params.parameter_names(model)
        self._step_checks = {id(o): params.StepCheck(names) for o in optimizers}
        self._scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self._scale = float(self._scaler.get_scale()) if self._scaler is not None else 0.0
        super().__init__(Eagerly(model, "nan_guard"))  # a compiled model runs eagerly while the block is open
        self._judge = Judge()
        self._open: list[tuple[int, Site]] = []  # (id(module), site) of the calls running now
        self._calls: dict[str, int] = {}
        self._calls_step = 0
        self._readings = Readings(self.sync)
        self._gradients = Gradients(self._handles, self._readings, self._see)
        self._keeps: set[int] = set()  # id() of the checked modules that keep finite values finite
        self._pointwise: set[int] = set()  # and of those that also keep finite gradients finite
        self._events: list[tuple[str, Site, list[Check]]] = []
        self._held: list[NonFiniteError] = []  # backward findings held until the scaler's decision
        self._passes = 0
        self._warned: set[tuple[str, str, str]] = set()
        self.findings: list[NonFiniteError] = []
        self.skipped_steps = 0
        self._lockstep = Lockstep(stepped=bool(optimizers))  # under torchrun: every rank raises at one check point
        self.evidence: AlertEvidence | None = None  # nan_guard(evidence=DIR): the bundle of the first finding

    def __repr__(self) -> str:
        return f"<Guard of {type(self.model).__name__}: {len(self._modules)} modules, {self.mode}, {self._state}>"

    @property
    def step_index(self) -> int:
        """The step being run (see the module docstring)."""
        if self._clock.optimizers or self._clock.manual:
            return self._clock.step_index
        return max(self._passes - 1, 0)

    def step(self) -> int:
        """End the step being run, for loops that count their own steps; returns the next index."""
        return self._clock.step()

    # -- lifecycle (core.block: entered once, hooks removed before the last read) --------------
    def _install(self, handles: HandleGroup) -> None:
        self._keeps = {id(m) for _, m in self._modules if finite.keeps_finite(m)}  # before its own hooks
        self._pointwise = {id(m) for _, m in self._modules if finite.pointwise(m)}
        for name, module in self._modules:
            allowed = id(module) in self._allowed
            handles.on_forward_pre(module, partial(self._before, name, allowed))
            handles.on_forward(module, self._after)
        self._clock.install(handles)

    def _release(self) -> None:
        self._open.clear()
        self._gradients.forget()  # gradients held for a call whose input gradient never came go too
        self._readings.forget()

    def _finish(self, exc: BaseException | None) -> None:
        if exc is None:
            self._read()
            self._settle_held()
            self._held.clear()  # the loop ended between a backward pass and its step: nothing was applied
            self._agree()

    # -- forward -----------------------------------------------------------------------------
    def _before(
        self, name: str, allowed: bool, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        outer = not self._open
        if outer:
            self._new_pass()
        if self.evidence is not None and module is self.model:  # the pass's inputs, for the bundle's reproducer
            self.evidence.keep_batch(module, args, kwargs)
        parent = self._open[-1][1] if self._open else None
        site = Site(name, self._next_call(name), len(self._open), outer, allowed, parent)
        self._open.append((id(module), site))
        if not kwargs and len(args) == 1 and type(args[0]) is Tensor:
            leaves: Leaves = [("args[0]", args[0])]
        else:
            leaves = flatten_call(args, kwargs)
        try:
            site.inputs = self._checks(leaves)
            self._see("enter", site, site.inputs)
        except BaseException:
            self._pop(id(module))  # raised in the pre-hook: no forward hook will close this call
            raise
        if torch.is_grad_enabled():
            self._gradients.watch(site, "grad_input", leaves)

    def _after(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        site = self._pop(id(module))
        if site is None or (output is None and sys.exc_info()[1] is not None):
            return  # the forward raised: nothing to judge
        if self.evidence is not None and module is self.model and type(output) is Tensor and output.requires_grad:
            self._handles.on_grad(output, self.evidence.keep_grad)  # what the loss sends back, for a reproducer
        leaves: Leaves = [("out", output)] if type(output) is Tensor else flatten(output)
        kept = id(module) in self._keeps and self.sync == "call" and bool(site.inputs)
        kept = kept and worst(site.inputs) == finite.FINITE
        if kept:  # finite inputs, so a finite output (``finite.keeps_finite``): not reduced
            site.outputs = [Check(k, self._readings.finite(t)) for k, t in leaves if finite.checkable(t)]
        else:
            site.outputs = self._checks(leaves)
        self._see("leave", site, site.outputs)
        if torch.is_grad_enabled():
            self._gradients.watch(site, "grad_output", leaves)
            if kept and id(module) in self._pointwise and len(args) == 1 and type(output) is Tensor:
                self._gradients.through(site, args[0], output)
        if not self._open and self.sync == "pass":
            self._read()

    def _pop(self, module: int) -> Site | None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == module:
                site = self._open[i][1]
                del self._open[i:]  # calls inside it that never finished (their forward raised)
                return site
        return None

    def _new_pass(self) -> None:
        """An outermost call starts: what the last pass left is read, the rule starts afresh."""
        self._read()
        self._settle_held()
        self._judge.new_pass()
        self._clock.touch()
        self._readings.forget()
        self._gradients.forget()
        if torch.is_grad_enabled():
            self._passes += 1

    def _next_call(self, name: str) -> int:
        step = self.step_index
        if step != self._calls_step:
            self._calls, self._calls_step = {}, step
        index = self._calls.get(name, 0)
        self._calls[name] = index + 1
        return index


def _default_sync(model: nn.Module) -> Sync:
    tensors = [*model.parameters(), *model.buffers()]
    return "pass" if any(t.device.type != "cpu" for t in tensors) else "call"
