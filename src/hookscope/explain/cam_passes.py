"""The passes ``cam()`` reads a layer through: its activations, and the gradient of the target's score
with respect to them, as ``(B, C, H, W)`` maps.

Gradients are taken with ``torch.autograd.grad`` on a forward pass fed a detached copy of the input,
so nothing accumulates into the model's ``param.grad``, frozen models work, and so does a call under
``torch.no_grad()`` or ``torch.inference_mode()``. The backward pass stops at the layer's output;
only when an in-place op changed that output later in the forward pass does it run the model again
and differentiate down to the input. With no layer named, the layer is chosen from the same forward
pass (``hookscope.explain.layers.choose_among``).
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from ..core.call import Call
from ..core.capture import capture
from ..errors import CaptureWarning, HookscopeError, OptionError, ShapeError
from .keys import layer_key
from .layers import choose_among
from .reach import as_maps, reaching
from .targets import Target, scores


class Where(NamedTuple):
    """Which tensors cam() reads: the layer's call and output key (layer None: cam() picks it from its
    own forward pass), and the model's output key."""

    layer: str | None
    call: int
    key: str | None
    output: str | None


class Pass(NamedTuple):
    """One forward pass: the model's output, the layer's calls, whether an in-place op changed the
    layer's output after the hook saw it, and the resolved Where."""

    out: Any
    calls: list[Call]
    changed: bool
    where: Where

    @property
    def chosen(self) -> Call | None:
        """The chosen call, None when it never ran."""
        return self.calls[self.where.call] if -len(self.calls) <= self.where.call < len(self.calls) else None


def _every(name: str, module: nn.Module) -> bool:
    return True


def _forward(model: nn.Module, x: Tensor, where: Where, target: Target, *, grad: bool) -> Pass:
    """One forward pass of a copy of ``x`` (the model may change its input in place). The layer's
    outputs are kept by reference, or, when no layer was named, every module's, and the layer is
    chosen from this pass (``choose_among``, its gradient probe on ``target``'s scores: the pass
    runs with gradients then, also for a forward-only method): no probe pass. A named layer without
    ``grad`` is copied, as any capture, so an in-place op after it cannot change what is kept."""
    grad = grad or where.layer is None
    with warnings.catch_warnings(), torch.inference_mode(False), torch.set_grad_enabled(grad):
        warnings.simplefilter("ignore", CaptureWarning)  # what could go wrong is checked below, and by a second pass
        leaf = x.detach().clone().requires_grad_(grad)  # a normal tensor, also from an inference one
        with capture(model, where.layer or _every, detach=not grad, clone=not grad) as live:
            out = model(leaf.clone())
        if where.layer is None:
            score = _probe_score(out, target, where.output)
            choice = choose_among(model, live, batch=len(x), reached=reaching(model, score))
            where = where._replace(layer=choice.layer, call=choice.call)
    changed = any(label.startswith(f"{where.layer!r} ") for label in live.changed_in_place())
    return Pass(out, live[str(where.layer)].calls, changed, where)


def _probe_score(out: Any, target: Target, output: str | None) -> Tensor | None:
    """The target's scores for the gradient probe; None when they cannot be read (the caller says why later)."""
    try:
        return scores(out, target, output)[0]
    except HookscopeError:
        return None


def gradient_maps(model: nn.Module, x: Tensor, target: Target, where: Where) -> tuple[Where, Tensor, Tensor]:
    """The layer's activations and the gradient of the target score with respect to them, as maps."""
    with torch.inference_mode(False), torch.enable_grad():  # also under the caller's no_grad
        where, found = _at_the_layer(model, x, target, where)
        activations, gradients = found or _through_the_input(model, x, target, where)
    return where, _maps(model, where, activations, len(x)), _maps(model, where, gradients, len(x))


def _at_the_layer(
    model: nn.Module, x: Tensor, target: Target, where: Where
) -> tuple[Where, tuple[Tensor, Tensor] | None]:
    """One forward pass, the layer's outputs kept by reference (no copy), and a backward pass that
    stops at the chosen call's outputs (on a CNN, half the work); the tensor read is the one
    ``layer_key`` picks among those the gradient reaches. None when an in-place op changed an output
    of the layer after the hook saw it (the values and the gradient would be those of the changed
    tensor), or no output requires grad: then ``_through_the_input`` runs the forward pass again."""
    passed = _forward(model, x, where, target, grad=True)
    where = passed.where
    picked, _ = scores(passed.out, target, where.output)
    if passed.chosen is None or passed.changed:
        return where, None
    held = {k: passed.chosen.get("output", k) for k in passed.chosen.keys("output")}
    outputs = {k: t for k, t in held.items() if t.requires_grad}
    if not outputs:
        return where, None
    found = torch.autograd.grad(picked.sum(), list(outputs.values()), allow_unused=True)
    reached = {k: g for k, g in zip(outputs, found, strict=True) if g is not None}
    key = layer_key(passed.chosen, str(where.layer), where.key, reached)
    return where, None if key is None else (held[key].detach(), reached[key])


def _through_the_input(model: nn.Module, x: Tensor, target: Target, where: Where) -> tuple[Tensor, Tensor]:
    """Copies of the layer's outputs, and their gradients taken by hooks on a backward pass that runs
    down to a copy of the input."""
    leaf = x.detach().clone().requires_grad_(True)
    with capture(model, where.layer, kinds=("output", "grad_output")) as cap:
        picked, _ = scores(model(leaf.clone()), target, where.output)
        torch.autograd.grad(picked.sum(), leaf)
    chosen = _one_call(cap[str(where.layer)].calls, where)
    key = layer_key(chosen, str(where.layer), where.key, chosen.keys("grad_output"))
    return chosen.get("output", key), chosen.get("grad_output", key)


def activation_maps(model: nn.Module, x: Tensor, where: Where, target: Target) -> tuple[Pass, Tensor]:
    """One forward pass without gradients and the layer's activations as maps (a second pass, copying
    the layer's outputs, only when the first kept references that an in-place op changed)."""
    with torch.no_grad():
        passed = _forward(model, x, where, target, grad=False)
        if passed.changed:
            passed = _forward(model, x, passed.where, target, grad=False)  # the layer is named now: copies
    chosen = _one_call(passed.calls, passed.where)
    key = layer_key(chosen, str(passed.where.layer), passed.where.key)
    return passed, _maps(model, passed.where, chosen.get("output", key).detach(), len(x))


def _maps(model: nn.Module, where: Where, tensor: Tensor, batch: int) -> Tensor:
    """``tensor`` as ``(B, C, H, W)`` maps (``reach.as_maps``), refused when its first axis is not the batch."""
    maps = as_maps(model, str(where.layer), tensor)
    if len(maps) != batch:
        raise ShapeError(
            f"cam() reads layer {where.layer!r}, whose output {tuple(tensor.shape)} has {len(maps)} rows for a batch "
            f"of {batch} (it folds another axis into the batch, as an LSTM over rows does); pass select= another layer"
        )
    return maps


def _one_call(calls: list[Call], where: Where) -> Call:
    try:
        return calls[where.call]
    except IndexError:
        raise OptionError(
            f"layer {where.layer!r} ran {len(calls)} time(s) in this forward; call={where.call} does not exist"
        ) from None
