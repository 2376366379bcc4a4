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


def test_functional_call_with_other_tensors_says_where_the_gradients_went() -> None:
    net = model()
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    said = "it ran under torch.func.functional_call, which puts the tensors passed in place"
    block = hookscope.capture(net, "0", kinds=("output", "param_grad"))
    with pytest.warns(hookscope.CaptureWarning, match=said) as found, block as cap:  # not "no backward pass ran"
        functional_call(net, params, (X,)).sum().backward()
    assert not any("no backward pass ran" in str(w.message) for w in found)
    (oracle,) = torch.autograd.grad(functional_call(net, params, (X,)).sum(), params["0.weight"])
    torch.testing.assert_close(params["0.weight"].grad, oracle)  # the passed tensors got the gradients
    assert net[0].weight.grad is None
    assert "functional_call" in cap["0"].missing["param_grad"]


def test_functional_call_with_the_modules_own_parameters_captures_param_grad() -> None:
    net = model()
    params = dict(net.named_parameters())
    with hookscope.capture(net, "0", kinds=("param_grad",)) as cap:
        functional_call(net, params, (X,)).sum().backward()
    (oracle,) = torch.autograd.grad(net(X).sum(), net[0].weight)
    torch.testing.assert_close(cap["0"].param_grad["weight"], oracle)
