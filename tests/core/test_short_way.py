"""The hooked call's short way (a call that returned one tensor, in an ordinary forward pass) keeps exactly
what the long way keeps: the same calls, indices, orders, kinds, keys, copies shared by aliases, references
and gradients. The long way is the reference (``phase.ordinary`` answering False sends every call there),
and hand-written hooks and ``torch.autograd.grad`` are the oracles."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.core import forward as forward_module
from hookscope.core import phase


def _model() -> nn.Module:
    torch.manual_seed(0)
    shared = nn.Linear(6, 6)  # called twice: two calls of one site
    return nn.Sequential(
        nn.Linear(4, 6),
        nn.ReLU(inplace=True),
        nn.Identity(),
        nn.Dropout(0.5),
        shared,
        nn.Tanh(),
        shared,
        nn.Linear(6, 2),
    ).eval()


def _captured(long_way: bool, monkeypatch: pytest.MonkeyPatch, **options: Any) -> tuple[hookscope.Capture, Tensor]:
    model, x = _model(), torch.randn(3, 4, requires_grad=True)
    kinds = options.pop("kinds", ("output",))
    with monkeypatch.context() as patched:
        if long_way:
            patched.setattr(forward_module, "ordinary", lambda: False)
        with contextlib.ExitStack() as stack:
            if options.get("clone") is False:  # the in-place ReLU rewrites the first Linear's kept reference
                stack.enter_context(pytest.warns(hookscope.CaptureWarning, match="'0' output out changed in place"))
            with hookscope.capture(model, kinds=kinds, **options) as cap:
                model(x).square().sum().backward()
    return cap, x


def _flat(cap: hookscope.Capture) -> list[tuple[Any, ...]]:
    """Every call as (site, index, order, error, layouts, missing, watched, reached, kind, key, tensor)."""
    rows = []
    for name, record in cap.items():
        for call in record.calls:
            head = (name, call.index, call.order, call.error, call.layouts, dict(call.missing), dict(call.watched))
            held = [(kind, key, t) for kind, by_key in call.tensors.items() for key, t in by_key.items()]
            rows.append((*head, sorted(call.reached), [(kind, key) for kind, key, _ in held], [t for *_, t in held]))
    return rows


def _same(short: hookscope.Capture, long: hookscope.Capture) -> None:
    a, b = _flat(short), _flat(long)
    assert [row[:-1] for row in a] == [row[:-1] for row in b]
    for row_a, row_b in zip(a, b, strict=True):
        for ta, tb in zip(row_a[-1], row_b[-1], strict=True):
            assert torch.equal(ta, tb) and ta.dtype == tb.dtype and ta.stride() == tb.stride()


@pytest.mark.parametrize("clone", [True, False])
def test_the_short_way_keeps_what_the_long_way_keeps(monkeypatch: pytest.MonkeyPatch, clone: bool) -> None:
    short, _ = _captured(False, monkeypatch, clone=clone)
    long, _ = _captured(True, monkeypatch, clone=clone)
    _same(short, long)
    assert short.changed_in_place() == long.changed_in_place()
    if not clone:  # the in-place ReLU rewrote the first Linear's output, which was kept by reference
        assert short.changed_in_place() == ["'0' output out"]


def test_the_short_way_keeps_outputs_and_gradients_as_an_oracle_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-written clone hooks and autograd.grad give the values; the alias (Identity, eval Dropout) is one copy."""
    short, x = _captured(False, monkeypatch, kinds=("output", "grad_output"))
    long, _ = _captured(True, monkeypatch, kinds=("output", "grad_output"))
    _same(short, long)
    model, outputs = _model(), []
    for module in model.children():  # each module once: the shared one runs its hook on both calls
        module.register_forward_hook(lambda m, a, out: outputs.append(out))
    y = model(x.detach().requires_grad_())
    grads = torch.autograd.grad(y.square().sum(), outputs)
    order = ["0", "1", "2", "3", "4", "5", "4", "7"]
    kept = [call for name in dict.fromkeys(order) for call in short[name].calls]
    kept.sort(key=lambda call: call.order)
    assert [call.site for call in kept] == order and [call.order for call in kept] == list(range(8))
    for call, out, grad in zip(kept, outputs, grads, strict=True):
        if call.site == "0":  # its output object was rewritten in place by the ReLU after it (tests/core/test_capture)
            continue
        assert torch.equal(call.tensors["grad_output"]["out"], grad)
        assert torch.equal(call.tensors["output"]["out"], out.detach())
    assert short["2"].output is short["3"].output is short["1"].output  # aliases stored once


def test_a_checkpointed_or_no_grad_call_takes_the_long_way() -> None:
    """``ordinary()`` is False exactly where ``call_phase()`` or a transform has something to say."""
    assert phase.ordinary()
    with torch.no_grad():
        assert phase.ordinary()
    with torch.inference_mode():
        assert phase.ordinary()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        assert not phase.ordinary()
    seen: list[bool] = []
    torch.func.vmap(lambda t: seen.append(phase.ordinary()) or t)(torch.ones(2, 3))
    assert seen == [False]
