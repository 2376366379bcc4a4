"""The producer rule: which module call made a NaN or an infinity, and the message that names it.

A *check* is one tensor at one moment (a call's input, its output, a gradient) with its
``extremes``; a *site* is one call of a checked module in the current step, with the checks of
what it received and returned, forward and backward. Events arrive in the order they happened
(``enter``, ``leave``, ``grad_output``, ``grad_input``) and ``Judge.see`` returns a ``Finding``
for the first call that raised the level (``finite`` < ``inf`` < ``nan``, see ``finite``):

* forward: the output of a call is worse than its inputs were when it started;
* backward: the gradient a call sends to its inputs is worse than the one it received;
* the outermost call's input (the data) or the gradient arriving at its output (the loss) is
  already non-finite: said as such, no module is blamed.

Downstream calls are never blamed: their inputs are no better than their outputs. An allowed
module (``allow=``) may produce infinities (an attention mask's ``-inf``), not NaN. Once a
finding is made in a pass (``mode="warn"`` goes on), until the next forward pass: calls whose
inputs were already non-finite are not judged (they are downstream of it), nor the calls around
the producer (the blocks that contain it), nor the backward pass of a broken forward pass.
Nested calls: the first event wins; the guard hands a gradient to the inner call before the outer
one (they share the tensor when a block's first layer is where the gradient broke).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..core.inference import version
from ..core.kinds import gradient_kinds
from ..errors import NonFiniteError
from . import finite
from .readings import Reading

GRADIENT_EVENTS = frozenset(gradient_kinds())  # the events of a backward pass


@dataclass(eq=False)
class Check:
    """A reading under the key it had at one site (``out``, ``args[0]``...)."""

    key: str
    reading: Reading

    @property
    def low(self) -> float:
        return self.reading.low

    @property
    def high(self) -> float:
        return self.reading.high

    @property
    def level(self) -> int:
        return self.reading.level

    def count(self) -> finite.Count | None:
        """The exact count, if the tensor is still alive and unchanged since it was checked."""
        tensor = self.reading.ref()
        if tensor is None or version(tensor) != self.reading.version:
            return None
        return finite.count(tensor)


@dataclass(eq=False)
class Site:
    """One call of a checked module in this step and what it saw."""

    name: str
    index: int  # the module's call in this step
    depth: int  # checked calls open around it: the inner of two calls on one tensor is the deeper
    outer: bool  # no checked call was open when it started: its input came from outside
    allowed: bool
    parent: Site | None = None  # the checked call it runs inside
    inputs: list[Check] = field(default_factory=list)
    outputs: list[Check] = field(default_factory=list)
    grad_outputs: list[Check] = field(default_factory=list)
    awaiting: int = 0  # the gradients of its inputs still to come (``hookscope.train.gradients``)


@dataclass
class Finding:
    """What ``Judge.see`` found: the offending check, at which site, and what came before it."""

    phase: str
    kind: str
    site: Site
    check: Check
    before: list[Check]  # what the producer received (empty for the data and the loss)


def worst(checks: list[Check]) -> int:
    return max((c.level for c in checks), default=finite.FINITE)


class Judge:
    """Applies the producer rule to events in the order they happened (see the module docstring)."""

    def __init__(self) -> None:
        self.found: set[str] = set()  # the phases of this pass with a finding
        self._blamed: set[int] = set()  # id() of the sites that hold a finding of this pass, and of their parents

    @property
    def tainted(self) -> bool:
        return bool(self.found)

    def new_pass(self) -> None:
        self.found.clear()
        self._blamed.clear()

    def see(self, event: str, site: Site, checks: list[Check]) -> Finding | None:
        if event in GRADIENT_EVENTS and "forward" in self.found:
            return None  # the backward pass of a broken forward pass: nothing new to find
        if event == "enter":
            return self._outside(site, checks, "forward", "input")
        if event == "grad_output":
            site.grad_outputs.extend(checks)
            return self._outside(site, checks, "backward", "grad_output")
        if id(site) in self._blamed:
            return None  # it holds the producer: a block around the layer that made the NaN
        floor = finite.INF if site.allowed else finite.FINITE
        if all(c.level <= floor for c in checks):
            return None  # the common case: what it made is fine, whatever it received
        before = site.inputs if event == "leave" else site.grad_outputs
        for c in before:
            c.reading.settle()  # a gradient held until it was needed (``Readings.later``)
        bad = [c for c in checks if c.level > max(worst(before), floor)]
        if not bad or (self.tainted and worst(before) > finite.FINITE):
            return None
        phase, kind = ("forward", "output") if event == "leave" else ("backward", "grad_input")
        return self._found(Finding(phase, kind, site, bad[0], before))

    def _outside(self, site: Site, checks: list[Check], phase: str, kind: str) -> Finding | None:
        if not site.outer or self.tainted:
            return None
        bad = [c for c in checks if c.level > finite.FINITE]
        if not bad:
            return None
        return self._found(Finding(phase, kind, site, bad[0], []))

    def _found(self, finding: Finding) -> Finding:
        self.found.add(finding.phase)
        site: Site | None = finding.site
        while site is not None:
            self._blamed.add(id(site))
            site = site.parent
        return finding


def error(finding: Finding, step: int, *, hint: str = "") -> NonFiniteError:
    """The error that names ``finding``: step, phase, module, call, kind, and the numbers."""
    site, check = finding.site, finding.check
    counted = check.count()
    value = counted.words() if counted is not None else finite.words(check.low, check.high)
    sizes = [size for c in finding.before if (size := c.reading.absmax()) is not None]
    received = max(sizes, default=None)
    message = f"step {step}, {finding.phase}: {_what(finding, value)}{_numbers(check.key, counted, finding, received)}"
    return NonFiniteError(
        message + hint,
        step=step,
        phase=finding.phase,
        module=site.name,
        call=site.index,
        kind=finding.kind,
        key=check.key,
        value=value,
        count=None if counted is None else counted.nonfinite,
        numel=None if counted is None else counted.numel,
        input_absmax=received,
    )


def hint(finding: Finding, module: nn.Module, *, scaled: bool) -> str:
    """What to add to the message: ``module``'s own parameters were already non-finite (an output finding),
    or a float16 backward finding without a GradScaler given (``scaled``)."""
    if finding.kind == "output":
        bad = [n for n, p in module.named_parameters() if finite.checkable(p) and finite.holds_nonfinite(p)]
        if bad:
            return f"; its own parameters are already non-finite ({', '.join(bad)}): made before this step"
    if finding.phase != "backward" or scaled or finding.check.reading.dtype != torch.float16:
        return ""
    return "; training with a GradScaler? pass it: nan_guard(model, optimizer, scaler=scaler)"


def _what(finding: Finding, value: str) -> str:
    site = finding.site
    who = "the model" if site.name == "" else f"{site.name!r} (call {site.index})"
    if finding.kind == "input":
        when = "before any module ran" if site.name == "" else "when it was called"
        source = "the data, not a module" if site.name == "" else "code outside the checked modules"
        return f"the input of {who} is already {value} {when}: it comes from {source}"
    if finding.kind == "grad_output":
        return (
            f"the gradient arriving at the output of {who} is already {value}: "
            "the loss computed from the output is not finite, no module produced it"
        )
    before = "inputs" if finding.kind == "output" else "grad_output"
    verb = "were" if finding.kind == "output" else "was"
    state = "finite" if worst(finding.before) == finite.FINITE else "without NaN (an allowed inf)"
    return f"{finding.kind} of {who} is {value} while its {before} {verb} {state}"


def _numbers(key: str, counted: finite.Count | None, finding: Finding, received: float | None) -> str:
    if counted is None:
        told = f" ({key}; freed or changed before it could be counted)"
    else:
        told = f" ({key}: {counted.nonfinite} of {counted.numel} elements non-finite"
        told += f", max |x| of the rest {counted.finite_absmax:.3g})" if counted.nonfinite < counted.numel else ")"
    if received is not None and finding.before:
        told += f"; max |x| of the {'inputs' if finding.kind == 'output' else 'grad_output'} {received:.3g}"
    if finding.kind == "grad_input":  # what the same call saw in the forward pass
        site = finding.site
        seen = [f"{what} {_absmax(checks)}" for what, checks in (("inputs", site.inputs), ("output", site.outputs))]
        told += f"; in the forward pass, max |x| of its {' and of its '.join(seen)}"
    return told


def _absmax(checks: list[Check]) -> str:
    values = [size for c in checks if (size := c.reading.absmax()) is not None]
    return f"{max(values):.3g}" if values else "(gone)"
