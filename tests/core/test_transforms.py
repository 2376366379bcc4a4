"""A capture around ``torch.func`` transforms: it never breaks the user's call, and says it recorded nothing.

Inside ``vmap``, ``grad`` or ``jacrev`` a hook sees wrapped tensors without storage of their own;
the capture counts the call, keeps nothing, and warns once naming the transform. The oracle for
"never breaks the call" is the same transform run without a capture: the results are equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, jacrev, vmap

import hookscope


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)).double()


def loss(net: nn.Module) -> Callable[..., torch.Tensor]:
    return lambda params, x: functional_call(net, params, (x,)).sum()


X = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
CASES: dict[str, tuple[str, Callable[[nn.Module], Any]]] = {
    "vmap": ("vmap", lambda net: vmap(net)(X)),
    "grad": ("grad", lambda net: grad(loss(net))(dict(net.named_parameters()), X[0])),
    "jacrev": ("grad", lambda net: jacrev(net)(X[0])),  # reverse mode: a grad level
    "vmap of grad": ("grad", lambda net: vmap(grad(loss(net)), in_dims=(None, 0))(dict(net.named_parameters()), X)),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kinds", [("output",), ("input", "output", "grad_output", "param_grad")])
def test_a_capture_around_a_transform_keeps_the_result_and_says_it_recorded_nothing(
    case: str, kinds: tuple[str, ...]
) -> None:
    name, run = CASES[case]
    net = model()
    expected = run(net)
    warned = pytest.warns(hookscope.CaptureWarning, match=rf"inside a torch.func transform \({name}\)")
    with warned as caught, hookscope.capture(net, nn.Linear, kinds=kinds) as cap:
        got = run(net)
    assert len(caught) == 1  # one line for every site and kind
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert [len(cap[site].calls) for site in cap] == [1, 1]
    with pytest.raises(hookscope.NotCapturedError, match=r"torch\.func transform"):
        cap["0"].output


def test_calls_outside_the_transform_are_still_recorded() -> None:
    net = model()
    with pytest.warns(hookscope.CaptureWarning, match="vmap"), hookscope.capture(net, "0") as cap:
        vmap(net)(X)
        net(X)
    torch.testing.assert_close(cap["0"].calls[1].output, net[0](X))
    assert [c.index for c in cap["0"].calls] == [0, 1]
