"""``nan_guard`` under activation checkpointing names the same producer as on the unchecked model.

The oracle is ``tests.checkpointed.Net(None)``: a fault born in the forward pass (an infinite
weight) and one born in the backward pass (sqrt at an exact zero) are found at the same phase,
module, logical call and kind with both ``use_reentrant`` values and ``checkpoint_wrapper``; a
clean checkpointed training step finds nothing.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

import hookscope
from tests.checkpointed import HOWS, Body, Net, batch, plain


class Root(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.sqrt(x.abs())  # an infinite slope at 0: a gradient fault born in backward


def body(net: Net) -> Body:
    inner = getattr(net.body, "_checkpoint_wrapped_module", net.body)
    assert isinstance(inner, Body)
    return inner


def forward_fault(net: Net) -> None:
    with torch.no_grad():
        body(net).mix.weight[0, 0] = math.inf


def backward_fault(net: Net) -> None:
    body(net).act = Root()
    with torch.no_grad():
        body(net).mix.weight[0].zero_()
        body(net).mix.bias[0] = 0.0  # unit 0 is exactly 0 in every call


def found(how: str | None, fault: str) -> tuple[object, ...]:
    net = Net(how)
    (forward_fault if fault == "forward" else backward_fault)(net)
    with pytest.raises(hookscope.NonFiniteError) as raised, hookscope.nan_guard(net):
        net(batch().requires_grad_()).sum().backward()
    e = raised.value
    return e.phase, plain(e.module), e.call, e.kind, e.key


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("fault", ["forward", "backward"])
def test_nan_guard_names_the_unchecked_models_producer(how: str, fault: str) -> None:
    assert found(how, fault) == found(None, fault)
    assert found(how, fault)[:2] == ((fault, "body.mix") if fault == "forward" else (fault, "body.act"))


@pytest.mark.parametrize("how", HOWS)
def test_a_clean_checkpointed_step_finds_nothing(how: str) -> None:
    net = Net(how)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with hookscope.nan_guard(net, opt) as guard:
        for _ in range(2):
            loss = net(batch().requires_grad_()).pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert guard.findings == []
