"""nan_guard reads less where the producer rule allows it, and names the same producer.

The output of a module that keeps finite values finite (a clamp, a zero padding) fed finite inputs
is not reduced; a gradient that is only a call's grad_output is reduced only when that call's
grad_input breaks, and dropped when its backward is done.
"""

from __future__ import annotations

import gc
import math
import weakref
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope import NonFiniteError, NonFiniteWarning
from hookscope.train import finite, readings

SYNCS = ["call", "pass"]


class Inf(torch.autograd.Function):
    """Identity forward; its backward returns inf times the gradient."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad * math.inf


class PadThen(nn.Module):
    """Pads with a child module, then an op of its own (the shape of a 'same'-padded convolution)."""

    def __init__(self, blow: bool) -> None:
        super().__init__()
        self.pad, self.blow = nn.ConstantPad1d(1, 0.0), blow
        self.grads: list[weakref.ref[Tensor]] = []

    def forward(self, x: Tensor) -> Tensor:
        padded = self.pad(x)
        padded.register_hook(lambda g: self.grads.append(weakref.ref(g)))
        return Inf.apply(padded) if self.blow else padded * 2  # type: ignore[no-any-return]


def padded(blow: bool) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU6(), PadThen(blow), nn.Linear(10, 1))


def reduced(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The shapes of the tensors the guard reduces (sync="call"), in order."""
    shapes: list[tuple[int, ...]] = []
    now = readings._now

    def spy(tensor: Tensor, reading: readings.Reading) -> int:
        shapes.append(tuple(tensor.shape))
        return now(tensor, reading)

    monkeypatch.setattr(readings, "_now", spy)
    return shapes


@pytest.mark.parametrize("sync", SYNCS)
def test_a_gradient_broken_under_a_padding_is_the_op_around_it_not_the_padding(sync: str) -> None:
    model = padded(blow=True)
    with (
        pytest.raises(NonFiniteError, match=r"backward: grad_input of '2' \(call 0\) is inf") as raised,
        hookscope.nan_guard(model, sync=sync),  # type: ignore[arg-type]
    ):
        model(torch.randn(16, 4).requires_grad_()).sum().backward()
    assert (raised.value.module, raised.value.kind, raised.value.key) == ("2", "grad_input", "args[0]")
    assert hookscope.find_hooks(model) == []


def test_a_finite_step_reduces_no_clamped_or_padded_output_nor_gradients_the_rule_does_not_need(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = padded(blow=False)
    shapes = reduced(monkeypatch)
    with hookscope.nan_guard(model):
        model(torch.randn(16, 4)).sum().backward()
        held = model[2].grads[0]
        gc.collect()
        assert held() is None  # the padding's grad_output: dropped unread once its backward was done
    # forward: the input, the outputs of Linear, PadThen and the model; backward: the loss's gradient, what
    # the last Linear and PadThen received; not what the padding received (held, dropped), nor what the clamp
    # sent to the first Linear (its own gradient alone, from a finite one)
    assert shapes == [(16, 4), (16, 8), (16, 10), (16, 1), (16, 1), (16, 10), (16, 8)]


class Times(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: Tensor) -> Tensor:
        return x * self.factor


def test_a_clamp_fed_a_non_finite_input_is_read_and_not_blamed(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), Times(math.inf), nn.ReLU6(), nn.Linear(8, 1))
    shapes = reduced(monkeypatch)
    with (
        pytest.warns(NonFiniteWarning, match=r"output of '1' \(call 0\) is"),
        hookscope.nan_guard(model, mode="warn") as guard,
    ):
        out = model(torch.randn(16, 4))
    assert [(e.phase, e.module, e.kind) for e in guard.findings] == [("forward", "1", "output")]
    assert bool(out.isfinite().all())  # ReLU6 clamped the inf: what follows is finite, and not blamed
    assert shapes.count((16, 8)) == 3  # Linear's, Times' and the clamp's outputs: its input was not finite


def test_which_modules_keep_finite_values_finite() -> None:
    kept = [nn.ReLU(), nn.ReLU6(), nn.Tanh(), nn.ZeroPad2d(1), nn.MaxPool2d(2), nn.Flatten(), nn.LeakyReLU(0.1)]
    assert all(finite.keeps_finite(m) for m in kept)
    hooked = nn.ReLU()
    hooked.register_forward_hook(lambda m, i, o: o * math.inf)
    changed = [nn.ConstantPad1d(1, math.inf), nn.Hardtanh(-math.inf, 1.0), nn.LeakyReLU(2.0), nn.Dropout(), hooked]
    changed += [nn.Linear(2, 2), nn.Softplus(), nn.AvgPool2d(2), type("MyReLU", (nn.ReLU,), {})()]
    assert not any(finite.keeps_finite(m) for m in changed)


def test_a_reading_held_for_later_is_taken_when_settled_and_dropped_when_released() -> None:
    taken = readings.Readings("call")
    grad = torch.tensor([1.0, math.inf])
    held = taken.later(grad)
    assert held.held is grad
    held.settle()
    assert (held.held, held.level, held.high) == (None, finite.INF, math.inf)
    assert taken.of(grad) is held  # unchanged: not reduced again
    dropped = taken.later(torch.ones(2))
    assert dropped.release() and dropped.held is None and not held.release()
    assert readings.Readings("pass").later(grad).held is None  # read per pass: taken with the others


class Blower(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return Inf.apply(x)  # type: ignore[no-any-return]


class Both(nn.Module):
    """Its input goes through a clamp (then a layer) and, beside it, through an op whose backward makes inf."""

    def __init__(self) -> None:
        super().__init__()
        self.act, self.mix, self.blow = nn.ReLU6(), nn.Linear(8, 8), Blower()

    def forward(self, x: Tensor) -> Tensor:
        return self.mix(self.act(x)) + self.blow(x)


def test_a_gradient_that_is_not_the_clamps_alone_is_read() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), Both(), nn.Linear(8, 1))
    with pytest.raises(NonFiniteError, match=r"backward: grad_input of '1\.") as raised, hookscope.nan_guard(model):
        model(torch.randn(16, 4)).sum().backward()
    assert (raised.value.kind, raised.value.value) == ("grad_input", "inf and -inf")


def test_a_held_gradient_whose_call_never_gets_its_input_gradient_goes_with_the_block() -> None:
    class Detached(nn.Module):
        """Its output depends on its input without a gradient: its grad_input never comes."""

        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(8))
            self.grads: list[weakref.ref[Tensor]] = []

        def forward(self, x: Tensor) -> Tensor:
            out = self.scale * x.detach()
            out.register_hook(lambda g: self.grads.append(weakref.ref(g)))
            return out

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Detached()

        def forward(self, x: Tensor) -> Tensor:
            return self.inner(x) * 2  # what the inner call returned is only its grad_output

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), Twice())
    with hookscope.nan_guard(model) as guard:
        model(torch.randn(16, 4)).sum().backward()
        gc.collect()
        assert model[1].inner.grads[0]() is not None  # held: the rule would need it if its grad_input came
    gc.collect()
    assert model[1].inner.grads[0]() is None and guard.findings == []
