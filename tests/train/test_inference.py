"""``nan_guard``, ``edit`` and ``watch`` under ``torch.inference_mode()``, the recommended evaluation context.

Inference tensors carry no version counter; the blocks that read one (an edit checking it did not
write in place, the guard reusing a reading) now work without it. Oracles: the same block under
``torch.no_grad()`` (same finding, same edited output) and a hand computation.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope import edits


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(inplace=True), nn.Linear(6, 3))


def finding(context: type[torch.no_grad] | type[torch.inference_mode], sync: str) -> hookscope.NonFiniteError:
    net = model()
    with torch.no_grad():
        net[2].weight[1, 2] = math.inf  # '2' turns finite activations into inf and nan
    with pytest.raises(hookscope.NonFiniteError) as raised, hookscope.nan_guard(net, sync=sync), context():
        net(torch.rand(5, 4) + 1.0)
    return raised.value


@pytest.mark.parametrize("sync", ["call", "pass"])
def test_nan_guard_finds_the_producer_under_inference_mode(sync: str) -> None:
    found, oracle = finding(torch.inference_mode, sync), finding(torch.no_grad, sync)
    assert (found.module, found.kind, found.call, found.value) == (
        oracle.module,
        oracle.kind,
        oracle.call,
        oracle.value,
    )
    assert found.module == "2" and found.kind == "output"


def test_nan_guard_passes_a_clean_evaluation_under_inference_mode() -> None:
    net = model()
    with hookscope.nan_guard(net) as guard, torch.inference_mode():
        for _ in range(3):
            net(torch.randn(5, 4))
    assert guard.findings == []


def test_an_edit_works_under_inference_mode() -> None:
    net, x = model(), torch.randn(5, 4)
    with hookscope.edit(net, {"0": edits.zero(channels=[1, 3])}) as ed, torch.inference_mode():
        got = net(x)
    hidden = F.linear(x, net[0].weight, net[0].bias) * torch.tensor([1.0, 0, 1, 0, 1, 1])  # by hand
    torch.testing.assert_close(got, F.linear(hidden.relu(), net[2].weight, net[2].bias))
    assert ed.report().rows[0].calls == (0,)


def test_an_in_place_edit_is_still_refused_under_inference_mode() -> None:
    net = model()
    wanted = pytest.raises(hookscope.errors.EditError, match="changed the tensor in place")
    with wanted, hookscope.edit(net, {"0": edits.function(lambda t, call: t.zero_())}), torch.inference_mode():
        net(torch.randn(5, 4))


def test_a_gradient_edit_under_inference_mode_names_it() -> None:
    net = model()
    wanted = pytest.raises(hookscope.errors.EditError, match=r"under torch\.inference_mode\(\)")
    with wanted, hookscope.edit(net, {"0": edits.scale(2.0, kind="grad_output")}), torch.inference_mode():
        net(torch.randn(5, 4))


def test_watch_ignores_evaluation_passes_under_inference_mode() -> None:
    def train(evaluate: bool) -> hookscope.Watch:
        net = model()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(3)
        with hookscope.watch(net, opt, every=1) as w:
            for _ in range(2):
                loss = F.cross_entropy(net(torch.randn(8, 4, generator=g)), torch.randint(0, 3, (8,), generator=g))
                opt.zero_grad()
                loss.backward()
                opt.step()
                if evaluate:
                    with torch.inference_mode():
                        net(torch.randn(8, 4) * 100)  # would change every activation statistic if counted
        return w

    got, oracle = train(True), train(False)
    for name in oracle.histories():
        torch.testing.assert_close(got.history(name).rows, oracle.history(name).rows, rtol=0, atol=0, equal_nan=True)
