"""A capture's forward hooks: what each call of a hooked module keeps, and the gradients it hooks.

``Capture`` mixes in :class:`ForwardHooks`; its hooks are installed by the kinds' points
(``hookscope.core.kinds``): a forward pre-hook for ``pre`` and ``input_grad``, a forward hook for
``forward`` and ``output_grad`` (the gradients themselves: ``core.backward``), post-accumulate hooks
for ``param``. Each handler takes every asked kind of its point, so a new kind at an existing point
needs nothing here. A call that returned one tensor in an ordinary forward pass may take the short
way (``_plain_hook``): one flat row of the capture's ``CallTable``.

Each call asks its phase once (``hookscope.core.phase``): activation checkpointing's rerun of a call
is that same logical call, not a new one (nothing kept twice; a reentrant rerun hooks its tensors,
whose gradients land on the logical call). A call made inside a ``torch.func`` transform is counted,
keeps nothing and is filed with its reason (``hookscope.core.inference``).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from .backward import GradientHooks
from .call import Call
from .diagnosis import FUNCTIONAL_CALL, IN_TRANSFORM, NO_GRAD_MODE, NO_TRAINABLE
from .experts import ExpertSites
from .inference import swapped, transform
from .kinds import Kind
from .phase import FORWARD, CallPhase, Regions, call_phase, ordinary, stopped
from .records import CallTable, Label, Record
from .tree import Leaves, flatten_call_layout, flatten_layout


class ForwardHooks(GradientHooks):
    """The forward hooks of a capture, and what they keep (``_keeper``) in its calls and records."""

    kinds: tuple[Kind, ...]
    _pre: tuple[Kind, ...]
    _forward: tuple[Kind, ...]
    _input_grads: tuple[Kind, ...]
    _output_grads: tuple[Kind, ...]
    _call_kinds: tuple[Kind, ...]
    _return_kinds: tuple[Kind, ...]
    _param_grads: bool
    _before_call: bool
    _plain: bool
    _experts: ExpertSites
    _table: CallTable
    _open: dict[str, list[tuple[Call | None, CallPhase | None]]]
    _order: itertools.count[int]
    _hooked: dict[str, dict[str, Tensor]]
    _raised: dict[int, tuple[str, int]]
    _regions: Regions[Call]
    _labels: dict[str, tuple[Kind, Label]]

    def _hook(self, record: Record, module: nn.Module) -> None:
        if self._plain:
            self._labels[record.name] = (self._forward[0], (record.name, self._forward[0], "out"))
        if self._before_call:
            self._handles.on_forward_pre(module, partial(self._before, record))
        plain = self._plain and not self._output_grads
        self._handles.on_forward(module, self._plain_hook(record) if plain else partial(self._after, record))
        self._experts.hook(self._handles, record.name, self._keep_all, partial(next, self._order))
        if self._param_grads:
            trainable = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
            self._hooked[record.name] = dict(trainable)
            for pname, param in trainable:
                record.param_grads[pname] = []
                self._handles.on_param_grad(param, partial(self._on_param_grad, record, pname))
            if not trainable:
                record.missing["param_grad"] = NO_TRAINABLE

    def _plain_hook(self, record: Record) -> Callable[[nn.Module, tuple[Any, ...], Any], None]:
        """The forward hook of a capture whose calls may take the short way and hook no gradient: a call
        that returned one tensor in an ordinary forward pass is filed flat (``CallTable``), any
        other goes the long way (``_after``). A closure: it runs on every hooked call."""
        after, keep, order, file = self._after, self._keeper.keep, self._order, self._table.filer()
        kind, label = self._labels[record.name]

        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if type(output) is Tensor and ordinary():
                file((record, next(order), kind, keep(output, label)))
            else:
                after(record, module, args, output)

        return hook

    def _before(self, record: Record, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if transform() is not None:
            self._open[record.name].append((self._untouched(record), None))
            return
        phase = call_phase()  # once per call: the forward hook reads it from _open
        if phase.repeat:  # checkpointing runs the call again: its gradients land on the logical call
            logical = self._regions.match(phase, record.name)
            self._open[record.name].append((logical, phase))
            if logical is not None and phase.reentrant:
                self._rewatch(logical, self._input_grads, flatten_call_layout(args, kwargs)[0], "input")
            return
        call = Call(record.name, record.called())
        record.add_call(call)
        self._open[record.name].append((call, phase))
        self._regions.note(phase, record.name, call)
        if not kwargs and len(args) == 1 and type(args[0]) is Tensor:  # one tensor: no layout to keep
            leaves: Leaves = [("args[0]", args[0])]
        else:
            leaves, layout = flatten_call_layout(args, kwargs)
            call.set_layout(self._call_kinds, layout)
        for kind in self._pre:
            call.tensors[kind] = self._keep_all(leaves, record.name, kind)
        for kind in self._input_grads:
            self._watch(call, kind, leaves, "input", phase)

    def _after(self, record: Record, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if self._plain and type(output) is Tensor and ordinary():  # the common call: one tensor, a flat row
            kind, label = self._labels[record.name]  # a plain capture that hooks gradients: a Call now
            order = next(self._order)
            made = Call.returned(record.name, record.called(), order, kind, self._keeper.keep(output, label))
            record.add_call(made)
            for grad_kind in self._output_grads:
                self._watch(made, grad_kind, [("out", output)], "output", FORWARD)
            return
        pending = self._open.get(record.name) if self._before_call else None  # calls a pre-hook opened
        if pending:
            opened, phase = pending.pop()
            if phase is None:  # inside a torch.func transform: nothing kept
                return
            if phase.repeat:
                self._after_repeat(opened, phase, output)
                return
            call = opened
        else:
            if transform() is not None:
                self._untouched(record)
                return
            phase = call_phase()
            if phase.repeat:
                self._after_repeat(self._regions.match(phase, record.name), phase, output)
                return
            call = Call(record.name, record.called())
            record.add_call(call)
            self._regions.note(phase, record.name, call)
        assert call is not None  # only a recomputation finds no call
        if self._param_grads and swapped(module, self._hooked.get(record.name, {})):
            call.missing["param_grad"] = FUNCTIONAL_CALL  # torch.func.functional_call: other tensors got the grads
        self._returned(record, call, phase, output)

    def _returned(self, record: Record, call: Call, phase: CallPhase, output: Any) -> None:
        """What a call returned, kept; its gradients hooked."""
        call.order = next(self._order)
        if output is None:
            raised = sys.exc_info()[1]
            if raised is not None:  # an always_call hook, after forward raised
                call.error = f"{type(raised).__name__}: {raised}"
                self._raised.setdefault(id(raised), (call.site, call.index))  # the innermost selected first
                return
        if self._param_grads and not torch.is_grad_enabled() and phase.phase != "first_pass":
            call.missing["param_grad"] = NO_GRAD_MODE
        if type(output) is Tensor:  # the common case, without flatten and its loops
            held, keep = call.tensors, self._keeper.keep
            for kind in self._forward:
                kept = keep(output, (record.name, kind, "out"))
                held[kind] = {} if kept is None else {"out": kept}
            for kind in self._output_grads:
                self._watch(call, kind, [("out", output)], "output", phase)
            return
        leaves, layout = flatten_layout(output)
        call.set_layout(self._return_kinds, layout)
        for kind in self._forward:
            call.tensors[kind] = self._keep_all(leaves, record.name, kind)
        for kind in self._output_grads:
            self._watch(call, kind, leaves, "output", phase)

    def _untouched(self, record: Record) -> Call:
        """A call made inside a torch.func transform: counted, nothing kept, the reason filed (core.inference)."""
        call = Call(record.name, record.called(), order=next(self._order))
        record.add_call(call)
        reason = IN_TRANSFORM.format(transform=transform())
        for kind in self.kinds:
            if kind != "param_grad":
                call.missing[kind] = reason
        if self._param_grads:
            call.missing["param_grad"] = reason
        return call

    def _after_repeat(self, logical: Call | None, phase: CallPhase, output: Any) -> None:
        """A recomputation's forward hook: nothing kept twice; its gradients go to the logical call."""
        if logical is None or (output is None and stopped(sys.exc_info()[1])):
            return  # unmatched, or checkpoint stopped the recomputation once it had what it needed
        if phase.reentrant:
            self._rewatch(logical, self._output_grads, flatten_layout(output)[0], "output")

    def _keep_all(self, leaves: Leaves, site: str, kind: Kind) -> dict[str, Tensor]:
        keep, held = self._keeper.keep, {}
        for key, tensor in leaves:  # a plain loop: this runs on every hooked call
            kept = keep(tensor, (site, kind, key))
            if kept is not None:
                held[key] = kept
        return held
