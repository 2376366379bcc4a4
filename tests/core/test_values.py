"""The shortcuts return what the module returned: its structure rebuilt from the kept tensors.

The oracle is the module's own return value (and torch.autograd.grad for the gradients): each
case runs the module plainly, then under a capture, and compares type, keys and every leaf.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, namedtuple
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from transformers.modeling_outputs import BaseModelOutput

import hookscope
from hookscope.core.tree import Arguments, NotKept, flatten_layout, rebuild

Pair = namedtuple("Pair", ["main", "aux", "steps"])


@dataclasses.dataclass
class Out:
    logits: Tensor
    hidden: Tensor | None
    name: str
    step: int = 0


@dataclasses.dataclass
class Strict:
    """A dataclass whose constructor refuses to be called again (it wants a positive scale)."""

    value: Tensor
    scale: float

    def __post_init__(self) -> None:
        if self.scale <= 0:
            raise ValueError("scale must be positive")


class Returns(nn.Module):
    """Returns ``make(h)`` for ``h = x * w``: each case picks a structure."""

    def __init__(self, make: Any) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
        self.make = make

    def forward(self, x: Tensor) -> Any:
        return self.make(x * self.w)


STRUCTURES = {
    "dict": lambda h: {"h": h, "sq": h * h, "steps": 3, "name": "ok", "none": None},
    "ordered": lambda h: OrderedDict([("b", h), ("a", h.sum(-1))]),
    "tuple": lambda h: (h, h.sum(-1), 7),
    "list": lambda h: [h, [h * 2, None]],
    "namedtuple": lambda h: Pair(h, h.exp(), 4),
    "dataclass": lambda h: Out(logits=h.tanh(), hidden=None, name="x", step=2),
    "model_output": lambda h: BaseModelOutput(last_hidden_state=h, hidden_states=(h, h * 3)),
    "nested": lambda h: {"pair": (h, {"deep": h + 1}), "dtype": h.dtype, "size": h.shape},
}


def run_both(make: Any, kinds: tuple[str, ...] = ("output",)) -> tuple[Any, hookscope.Call]:
    torch.manual_seed(0)
    x = torch.randn(2, 3)
    net = nn.Sequential(Returns(make))
    plain = net(x)
    with hookscope.capture(net, "0", kinds=kinds) as cap:
        net(x)
    return plain, cap["0"].calls[0]


def assert_same(got: Any, expected: Any) -> None:
    """Same type, same keys and fields, equal tensors, equal plain leaves, all the way down."""
    assert type(got) is type(expected), (type(got), type(expected))
    if isinstance(expected, Tensor):
        assert torch.equal(got, expected.detach())
    elif isinstance(expected, dict):
        assert list(got) == list(expected)
        for key in expected:
            assert_same(got[key], expected[key])
    elif dataclasses.is_dataclass(expected):
        for field in dataclasses.fields(expected):
            assert_same(getattr(got, field.name), getattr(expected, field.name))
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert_same(a, b)
    else:
        assert got == expected


@pytest.mark.parametrize("name", STRUCTURES)
def test_output_is_what_the_module_returned(name):
    """.output has the module's own type, keys, fields and values, non-tensor leaves included."""
    plain, call = run_both(STRUCTURES[name])
    assert_same(call.output, plain)


def test_record_shortcut_and_values_agree():
    """record.output (one call) and record.values() give the structured value; stack needs a key."""
    torch.manual_seed(0)
    net = nn.Sequential(Returns(STRUCTURES["dict"]))
    x = torch.randn(2, 3)
    with hookscope.capture(net, "0") as cap:
        net(x)
        net(x * 2)
    record = cap["0"]
    assert [v["steps"] for v in record.values()] == [3, 3]
    torch.testing.assert_close(record.values()[1]["sq"], (x * 2 * net[0].w).pow(2).detach())
    with pytest.raises(hookscope.AmbiguousCallError, match=r"holds 2 tensors .*pass key="):
        record.stack("output")
    assert record.stack("output", key="out['sq']").shape == (2, 2, 3)


def test_non_tensor_object_is_named_not_kept():
    """An object that is neither a tensor nor a plain value comes back as a NotKept naming its type."""
    marker = object()
    plain, call = run_both(lambda h: (h, marker))
    got = call.output
    assert torch.equal(got[0], plain[0].detach())
    assert isinstance(got[1], NotKept) and got[1].type == "object"
    assert "not kept: object" in repr(got[1])


def test_class_that_cannot_be_rebuilt_becomes_a_plain_dataclass():
    """A dataclass whose __post_init__ refuses the stored fields comes back as a plain dataclass of the
    same name and fields (the documented equivalent), with the values."""
    h = torch.ones(2)
    leaves, layout = flatten_layout(Strict(h, 1.0))
    broken = dataclasses.replace(layout, children=(layout.children[0], type(layout.children[1])(-1.0)))
    got = rebuild(broken, dict(leaves))
    assert type(got).__name__ == "Strict" and type(got) is not Strict
    assert dataclasses.is_dataclass(got) and got.scale == -1.0 and torch.equal(got.value, h)


def test_lstm_output_and_grads_keep_their_structure():
    """nn.LSTM returns (out, (h, c)): .output is that; .grad_output has the same structure, each part
    equal to torch.autograd.grad of the loss, with None where no gradient arrived."""
    torch.manual_seed(0)
    lstm = nn.LSTM(3, 4, batch_first=True)
    x = torch.randn(2, 5, 3)

    def loss(result: Any) -> Tensor:
        out, (h, _) = result
        return (out * torch.linspace(-1, 1, 4)).sum() + (h**2).sum()

    expected = lstm(x)
    grads = torch.autograd.grad(loss(expected), [expected[0], expected[1][0]])
    with hookscope.capture(lstm, "", kinds=("output", "grad_output")) as cap:
        loss(lstm(x)).backward()
    got = cap[""].output
    assert_same(got, expected)
    grad_out, (grad_h, grad_c) = cap[""].grad_output
    torch.testing.assert_close(grad_out, grads[0])
    torch.testing.assert_close(grad_h, grads[1])
    assert grad_c is None  # c was not used by the loss: no gradient reached it


class TwoInputs(nn.Module):
    def forward(self, x: Tensor, y: Tensor, *, scale: float = 1.0, mask: Tensor | None = None) -> Tensor:
        out = (x + y) * scale
        return out if mask is None else out * mask


def test_input_is_the_argument_or_arguments():
    """One positional argument: .input is it. Several, or keywords: Arguments(args, kwargs), with
    plain values as passed; grad_input has the same shape of answer."""
    net = nn.Sequential(nn.Linear(3, 3))
    x = torch.randn(2, 3)
    with hookscope.capture(net, "0", kinds="input") as cap:
        net(x)
    assert torch.equal(cap["0"].input, x)

    two = TwoInputs()
    a, b = torch.randn(2, 3, requires_grad=True), torch.randn(2, 3, requires_grad=True)
    mask = torch.tensor([1.0, 0.0, 2.0])
    with hookscope.capture(two, "", kinds=("input", "grad_input")) as cap:
        (two(a, b, scale=3.0, mask=mask) ** 2).sum().backward()
    args, kwargs = cap[""].input
    assert isinstance(cap[""].input, Arguments)
    assert torch.equal(args[0], a.detach()) and torch.equal(args[1], b.detach())
    assert kwargs["scale"] == 3.0 and torch.equal(kwargs["mask"], mask)
    ga, gb = torch.autograd.grad((TwoInputs()(a, b, scale=3.0, mask=mask) ** 2).sum(), [a, b])
    grads = cap[""].grad_input
    torch.testing.assert_close(grads.args[0], ga)
    torch.testing.assert_close(grads.args[1], gb)
    assert grads.kwargs["mask"] is None and grads.kwargs["scale"] == 3.0


def test_missing_kind_still_says_why():
    """A structured output whose gradient never came: the shortcut raises the reason, as before."""
    net = nn.Sequential(Returns(STRUCTURES["tuple"]))
    capture = hookscope.capture(net, "0", kinds=("output", "grad_output"))
    with pytest.warns(hookscope.CaptureWarning, match="no backward pass ran"), capture as cap:
        net(torch.randn(2, 3))
    with pytest.raises(hookscope.NotCapturedError, match="no backward pass ran"):
        cap["0"].grad_output
