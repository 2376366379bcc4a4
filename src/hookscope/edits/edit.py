"""``hookscope.edit(model, {selector: edit})``: hooks that change what layers produce or receive.

::

    with hookscope.edit(model, {"layer4": edits.zero(channels=[3, 17]),
                                "layer2.0.conv1": edits.scale(0.5)}) as ed:
        logits = model(x)
    print(ed.report())     # per site: calls edited, elements changed, |y' - y| / |y|

Selectors, keys and calls are the captures' (``hookscope.core.select``, ``hookscope.core.tree``):
each module a selector picks gets the edits given for it, applied in the order given. An
``output`` edit is a forward hook that returns the edited value (so a following
``ReLU(inplace=True)`` works on the edited tensor, never on one the caller holds); an ``input``
edit is a forward pre-hook that returns the edited ``(args, kwargs)``; a ``grad_output`` edit is a
tensor hook on the module's output (the edited one, when it is edited too) that returns the
edited gradient: ``register_full_backward_hook`` is not used, it raises on in-place ops
(pytorch/pytorch#61519). Parameters are never touched; hooks are removed in ``finally``.

Never silent: at the end of the block, an edit whose selector's modules never ran, whose
``call=`` never happened, whose key never appeared, whose gradient never came, or that changed
nothing raises ``EditError`` naming the site and the reason (a zero-ablation of a tensor that was
already zero is not a failure; the report says so). ``strict=False`` warns (``EditWarning``) instead.

Under activation checkpointing an edit follows its call into the recomputation (the same change,
counted once; ``call=k`` counts logical calls, ``hookscope.core.phase``), so the recomputed
activations match and torch raises no ``CheckpointError``; a block that ends while a region it
edited still awaits its backward pass raises ``EditError`` naming checkpointing.

With a capture: hooks run in the order they were registered, so a capture opened inside the
edit block sees the edited values (and gradients); one opened outside it sees the originals::

    with hookscope.edit(model, {"conv1": edits.zero()}), hookscope.capture(model, "relu") as cap:
        model(x)          # cap["relu"].output is what the ReLU made of the zeroed conv1
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from ..core.block import Block
from ..core.compiled import Eagerly
from ..core.hooks import HandleGroup
from ..core.inference import no_grad_context
from ..core.phase import CallPhase, Regions, call_phase
from ..core.scripted import hookable
from ..core.select import Selector, select_modules
from ..core.tree import Layout, Leaves, Node, NotKept, flatten_call_layout, flatten_layout, rebuild
from ..errors import EditError, EditWarning
from .edit_op import EditOp, UserFunction
from .ops import as_op
from .tally import EditReport, Tally
from .values import Where

EditSpec = EditOp | UserFunction | Sequence[EditOp | UserFunction]


def edit(model: nn.Module, edits: Mapping[Selector, EditSpec], *, strict: bool = True) -> Edit:
    """Edit the modules of ``model`` that each selector picks, inside a ``with`` block (module doc).

    ``edits`` maps a selector to an edit of ``hookscope.edits`` (or a function ``(tensor, call) ->
    tensor``), or to a list of them, applied in order. ``strict=False``: what would raise
    ``EditError`` at the end of the block warns ``EditWarning`` instead.

    Args:
        model: the network whose modules are edited.
        edits: selector -> an edit (``edits.zero(...)``, ``edits.scale(...)``... or a function
            ``(tensor, call) -> tensor``), or a list of them applied in order.
        strict: raise ``EditError`` at the end of the block when an edit never took effect; False
            warns ``EditWarning`` instead.

    Returns:
        An ``Edit`` block; its hooks are in place inside ``with`` and gone after it.

    Raises:
        EditError: ``edits`` is not a non-empty dict, or an edit is malformed.
        SelectionError: a selector matches no module.
    """
    return Edit(model, edits, strict=strict)


@dataclass(eq=False)
class _Site:
    name: str
    module: nn.Module
    tallies: dict[str, list[Tally]] = field(default_factory=lambda: {"input": [], "output": [], "grad_output": []})
    inputs: int = 0  # calls seen by the pre-hook
    outputs: int = 0  # calls seen by the forward hook


class Edit(Block):
    """One edit block: its hooks, and what each edit did (``report()``).

    Built by ``hookscope.edit``.

    Args:
        model: the network whose modules are edited.
        edits: selector -> an edit, or a list of them applied in order.
        strict: raise ``EditError`` when an edit never took effect; False warns ``EditWarning``.

    Raises:
        EditError: ``edits`` is not a non-empty dict, or an edit is malformed.
        SelectionError: a selector matches no module.
    """

    noun, remake = "edit block", "hookscope.edit(...)"

    def __init__(self, model: nn.Module, edits: Mapping[Selector, EditSpec], *, strict: bool = True) -> None:
        if not isinstance(edits, Mapping) or not edits:
            raise EditError("hookscope.edit needs a dict {selector: edit}, e.g. {'layer4': edits.zero(channels=[3])}")
        self.model, self.strict = model, strict
        self._sites: dict[str, _Site] = {}
        self._entries: list[tuple[str, list[Tally]]] = []
        for selector, spec in edits.items():
            listed: Sequence[Any] = spec if isinstance(spec, (list, tuple)) else [spec]
            ops = [as_op(one) for one in listed]
            tallies = []
            for name, module in hookable(model, select_modules(model, selector), selector, "edit"):
                site = self._sites.setdefault(name, _Site(name, module))
                for op in ops:
                    tally = Tally(name, op, _described(selector))
                    site.tallies[op.kind].append(tally)
                    tallies.append(tally)
            self._entries.append((_described(selector), tallies))
        self._regions: Regions[int] = Regions()  # checkpointed calls, for their recomputation (core.phase)
        self._edited: weakref.WeakSet[Any] = weakref.WeakSet()  # checkpoint regions an edit changed
        super().__init__(Eagerly(model, "edit block"))  # a compiled model runs eagerly in the block, so edits fire

    def __repr__(self) -> str:
        edits = sum(len(t) for _, t in self._entries)
        return f"<Edit of {type(self.model).__name__}: {edits} edit(s) at {len(self._sites)} module(s), {self._state}>"

    # -- lifecycle (core.block: entered once, hooks removed before the check) -------------------
    def _install(self, handles: HandleGroup) -> None:
        for site in self._sites.values():
            if site.tallies["input"]:
                handles.on_forward_pre(site.module, partial(self._before, site))
            if site.tallies["output"] or site.tallies["grad_output"]:
                handles.on_forward(site.module, partial(self._after, site), always_call=False)

    def _finish(self, exc: BaseException | None) -> None:
        if exc is None:
            self._check()

    def report(self) -> EditReport:
        """Every edit at every module it reached: calls edited, elements changed, relative change.

        Returns:
            An ``EditReport``, a row per (edit, module), with ``table()`` and the notebook view.
        """
        rows = []
        for site in self._sites.values():
            for tally in (t for kind in site.tallies.values() for t in kind):
                row = tally.row()
                if not site.inputs and not site.outputs and not row.note:
                    row = type(row)(**{**row.__dict__, "note": "did not run"})
                rows.append(row)
        return EditReport(rows)

    # -- hooks -------------------------------------------------------------------------------
    def _index(self, site: _Site, kind: str, phase: CallPhase) -> int | None:
        """The logical call index of this call of ``site`` (a recomputation repeats one; None: unknown)."""
        if phase.repeat:
            return self._regions.match(phase, f"{site.name}:{kind}")
        ran = site.inputs if kind == "input" else site.outputs
        if kind == "input":
            site.inputs += 1
        else:
            site.outputs += 1
        self._regions.note(phase, f"{site.name}:{kind}", ran)
        return ran

    def _before(self, site: _Site, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        phase = call_phase()
        index = self._index(site, "input", phase)
        tallies = [t for t in site.tallies["input"] if t.op.call in (None, index)]
        if not tallies or index is None:
            return None
        if not kwargs and len(args) == 1 and type(args[0]) is Tensor:
            held = self._apply(tallies, [("args[0]", args[0])], site.name, index, phase=phase)
            return None if held is None else ((held["args[0]"],), kwargs)
        leaves, layout = flatten_call_layout(args, kwargs)
        held = self._apply(tallies, leaves, site.name, index, layout, phase=phase)
        if held is None:
            return None
        value = rebuild(layout, held)
        return tuple(value.args), dict(value.kwargs)

    def _after(self, site: _Site, module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        phase = call_phase()
        index = self._index(site, "output", phase)
        if index is None:
            return None
        edits = [t for t in site.tallies["output"] if t.op.call in (None, index)]
        grads = [t for t in site.tallies["grad_output"] if t.op.call in (None, index)]
        if not edits and not grads:
            return None
        plain = type(output) is Tensor
        leaves, layout = ([("out", output)], None) if plain else flatten_layout(output)
        held = self._apply(edits, leaves, site.name, index, layout, phase=phase) if edits else None
        for tally in grads if phase.carries_grad else []:  # reentrant: hooked in its recomputation
            self._watch(tally, held or dict(leaves), site.name, index)
        if held is None:
            return None
        return held["out"] if plain else rebuild(layout, held)  # type: ignore[arg-type]

    def _apply(
        self,
        tallies: list[Tally],
        leaves: Leaves,
        site: str,
        index: int,
        layout: Layout | None = None,
        *,
        phase: CallPhase,
    ) -> dict[str, Tensor] | None:
        """The leaves with every edit of ``tallies`` applied in turn; None when none applied.

        A recomputation (``phase.repeat``) gets the same change, not counted a second time."""
        held, touched = dict(leaves), False
        for tally in tallies:
            key = _key(tally, held)
            if key is None:
                continue
            if layout is not None and _holds_objects(layout):
                tally.problem(
                    f"its {tally.op.kind} holds objects other than tensors and plain values, "
                    "which an edit cannot put back"
                )
                continue
            before, where = held[key], Where(site, tally.op.kind, key, index)
            if tally.op.tokens is not None and not bool(tally.op.tokens.pick(before, where).any()):
                continue  # a call holding none of its tokens (the prompt, for positions="new") is not edited
            held[key] = tally.op(before, where)
            if not phase.repeat:
                tally.add(before, held[key], index, key)
            touched = True
        if touched and phase.region is not None and not phase.repeat:
            self._edited.add(phase.region)
        return held if touched else None

    def _watch(self, tally: Tally, held: Mapping[str, Tensor], site: str, index: int) -> None:
        key = _key(tally, held)
        if key is None:
            return
        tensor = held[key]
        if not torch.is_grad_enabled() or not tensor.requires_grad:
            why = f"under {no_grad_context()}" if not torch.is_grad_enabled() else "its output does not require grad"
            tally.problem(f"no gradient can reach it: {why}")
            return
        self._handles.on_grad(tensor, partial(self._on_grad, tally, Where(site, "grad_output", key, index)))

    def _on_grad(self, tally: Tally, where: Where, grad: Tensor) -> Tensor:
        edited = tally.op(grad, where)
        tally.add(grad, edited, where.call, where.key)
        return edited

    # -- at the end ----------------------------------------------------------------------------
    def _check(self) -> None:
        failures = []
        waiting = [region for region in self._edited if not self._regions.replayed(region)]
        if waiting:
            failures.append(
                f"the edit block ended while {len(waiting)} torch.utils.checkpoint region(s) it edited still "
                "await their backward pass, which recomputes them without the edit (torch raises CheckpointError, "
                "or the gradients are the unedited model's); call .backward() inside the `with` block"
            )
        for selector, tallies in self._entries:
            sites = [self._sites[name] for name in dict.fromkeys(t.site for t in tallies)]
            if not any(site.inputs or site.outputs for site in sites):
                names = ", ".join(repr(s.name) for s in sites[:4]) + (" ..." if len(sites) > 4 else "")
                failures.append(f"edit at {selector}: {names} never ran inside the block; call the model inside it")
                continue
            for tally in tallies:
                site = self._sites[tally.site]
                ran = site.inputs if tally.op.kind == "input" else site.outputs
                if ran and tally.op.call is not None and tally.op.call >= ran:
                    tally.problem(f"call {tally.op.call} never happened: {tally.site!r} ran {ran} time(s)")
                elif ran and tally.op.kind == "grad_output" and not tally.calls and not tally.problems:
                    tally.problem("no backward pass reached its output; call .backward() inside the block")
                elif ran and tally.op.tokens is not None and not tally.calls and not tally.problems:
                    tally.problem(tally.op.tokens.missed(ran))
                failure = tally.failure() if ran else None
                if failure:
                    failures.append(failure)
        if not failures:
            return
        if self.strict:
            more = f" (and {len(failures) - 1} more; see .report())" if len(failures) > 1 else ""
            raise EditError(f"{failures[0]}{more}; pass strict=False to warn instead")
        for line in failures:
            warnings.warn(line, EditWarning, stacklevel=4)  # _finish, __exit__, the user's with


def _key(tally: Tally, held: Mapping[str, Tensor]) -> str | None:
    """The key ``tally``'s edit acts on, or None (and a problem noted) when there is none to take."""
    keys = list(held)
    if tally.op.key is not None:
        if tally.op.key in held:
            return tally.op.key
        tally.problem(
            f"key {tally.op.key!r} never appeared; its {tally.op.kind} holds {', '.join(keys) or 'no tensor'}"
        )
        return None
    if len(keys) == 1:
        return keys[0]
    if not keys:
        tally.problem(f"its {tally.op.kind} holds no tensor")
        return None
    tally.problem(
        f"its {tally.op.kind} holds {len(keys)} tensors ({', '.join(keys[:4])}); pass key=, e.g. key={keys[0]!r}"
    )
    return None


def _holds_objects(layout: Layout) -> bool:
    if isinstance(layout, NotKept):
        return True
    return isinstance(layout, Node) and any(_holds_objects(child) for child in layout.children)


def _described(selector: Selector) -> str:
    if isinstance(selector, str):
        return repr(selector)
    if isinstance(selector, type):
        return selector.__name__
    return type(selector).__name__ if isinstance(selector, nn.Module) else repr(selector)
