"""Activation checkpointing: each logical call is recorded once, with the unchecked model's values.

The oracle is the same network run without a checkpoint (``tests.checkpointed.Net(None)``): with
``torch.utils.checkpoint`` (both ``use_reentrant`` values) and ``checkpoint_wrapper``, every call's
values and gradients, the parameter gradients, ``gradient_flow`` and ``watch``'s histories equal it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope.core.phase import call_phase
from tests.checkpointed import HOWS, Net, batch, plain, sites

KINDS = ("input", "output", "grad_input", "grad_output")


def run_capture(net: Net, kinds: tuple[str, ...] = KINDS) -> hookscope.Capture:
    with hookscope.capture(net, sites(net), kinds=kinds) as cap:
        net(batch().requires_grad_()).pow(2).sum().backward()
    return cap


def param_grads(net: Net) -> hookscope.Capture:
    with hookscope.capture(net, nn.Linear, kinds=("param_grad",)) as cap:
        net(batch().requires_grad_()).pow(2).sum().backward()
    return cap


@pytest.mark.parametrize(("how", "phases"), [
    ("non-reentrant", ["forward", "forward", "recompute", "recompute"]),
    ("reentrant", ["first_pass", "first_pass", "recompute", "recompute"]),
])  # fmt: skip
def test_each_call_knows_its_phase_and_region(how: str, phases: list[str]) -> None:
    net, seen = Net(how), []
    handle = net.body.mix.register_forward_hook(lambda *_: seen.append(call_phase()))
    net(batch().requires_grad_()).sum().backward()
    handle.remove()
    assert [p.phase for p in seen] == phases
    assert len({id(p.region) for p in seen}) == 1 and seen[0].region is not None  # one region, both passes
    assert [p.repeat for p in seen] == [False, False, True, True]
    assert [p.carries_grad for p in seen] == (
        [True, True, False, False] if how == "non-reentrant" else [False] * 2 + [True] * 2
    )


def test_a_call_outside_any_checkpoint_is_a_plain_forward_call() -> None:
    net, seen = Net(None), []
    handle = net.stem.register_forward_hook(lambda *_: seen.append(call_phase()))
    y = net(batch())
    with torch.no_grad():
        net(batch())
    y.sum().backward()
    handle.remove()
    assert [(p.phase, p.region) for p in seen] == [("forward", None), ("forward", None)]


@pytest.mark.parametrize("how", HOWS)
def test_capture_under_checkpointing_equals_the_unchecked_model(how: str) -> None:
    ref, got = run_capture(Net(None)), run_capture(net := Net(how))
    for name in sites(net):
        mine, theirs = got[name], ref[plain(name)]
        assert len(mine.calls) == len(theirs.calls) == (2 if "body" in name else 1)  # the recompute is no call
        for a, b in zip(mine.calls, theirs.calls, strict=True):
            for kind in KINDS:
                torch.testing.assert_close(a.get(kind), b.get(kind), rtol=0, atol=1e-12)
    ref_params, got_params = param_grads(Net(None)), param_grads(Net(how))
    assert sorted(map(plain, got_params)) == sorted(ref_params)
    for name in got_params:
        mine_grads, their_grads = got_params[name].param_grad, ref_params[plain(name)].param_grad
        assert mine_grads.keys() == their_grads.keys()
        for pname in mine_grads:
            torch.testing.assert_close(mine_grads[pname], their_grads[pname], rtol=0, atol=1e-12)
    assert got[sites(net)[1]].calls[1].index == 1
    torch.testing.assert_close(got[sites(net)[0]].output, ref["stem"].output)  # .output: one call, no ambiguity


@pytest.mark.parametrize("how", HOWS)
def test_gradient_flow_under_checkpointing_equals_the_unchecked_model(how: str) -> None:
    ref, got = run_capture(Net(None), ("grad_output",)), run_capture(Net(how), ("grad_output",))
    flow, oracle = hookscope.gradient_flow(got), hookscope.gradient_flow(ref)
    assert [plain(row.name) for row in flow] == [row.name for row in oracle]
    for mine, theirs in zip(flow, oracle, strict=True):
        assert math.isclose(mine.mean_abs, theirs.mean_abs, rel_tol=1e-12)
        assert math.isclose(mine.max_abs, theirs.max_abs, rel_tol=1e-12)
        assert mine.count == theirs.count  # the recomputation pools nothing in


def test_the_reentrant_first_pass_is_named_checkpointing_not_no_grad() -> None:
    net = Net("reentrant")
    wanted = pytest.warns(hookscope.CaptureWarning, match="reentrant torch.utils.checkpoint")
    with wanted as caught, hookscope.capture(net, "body.mix", kinds=("output", "grad_output")) as cap:
        net(batch().requires_grad_())  # no backward pass: the recomputation never ran
    assert not any("no_grad" in str(w.message) for w in caught)
    assert len(cap["body.mix"].calls) == 2


def test_without_checkpointing_no_grad_is_still_named() -> None:
    net = Net(None)
    wanted = pytest.warns(hookscope.CaptureWarning, match=r"torch.no_grad\(\)")
    with wanted, hookscope.capture(net, "body.mix", kinds=("grad_output",)), torch.no_grad():
        net(batch())


def watched(how: str | None) -> Any:
    net = Net(how)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(2)
    with hookscope.watch(net, opt, every=2) as w:
        for _ in range(3):
            x = torch.randn(16, 6, generator=g, dtype=torch.float64, requires_grad=True)
            loss = F.cross_entropy(net(x), torch.randint(0, 3, (16,), generator=g))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return w


@pytest.mark.parametrize("how", HOWS)
def test_watch_histories_under_checkpointing_equal_the_unchecked_model(how: str) -> None:
    ref, got = watched(None), watched(how)
    assert sorted(map(plain, got.histories())) == sorted(ref.histories())
    for name in got.histories():
        mine, theirs = got.history(name), ref.history(plain(name))
        assert mine.steps == theirs.steps == [0, 2]
        for step in mine.steps:
            a, b = mine.row(step), theirs.row(step)
            assert a.keys() == b.keys()
            for column in a:
                same = math.isclose(a[column], b[column], rel_tol=1e-9, abs_tol=1e-15)
                assert same or (math.isnan(a[column]) and math.isnan(b[column])), (name, step, column)


def test_a_module_run_by_a_hook_inside_backward_is_an_ordinary_call() -> None:
    lin, seen = nn.Linear(2, 2).double(), []
    handle = lin.register_forward_hook(lambda *_: seen.append(call_phase().phase))
    x = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    x.register_hook(lambda g: lin(g))  # a module called inside the backward pass, by no checkpoint
    (x * 2).sum().backward()
    handle.remove()
    assert seen == ["forward"]


@pytest.mark.parametrize("how", HOWS)
def test_two_backward_passes_sum_on_the_logical_call_as_unchecked(how: str) -> None:
    def twice(net: Net) -> hookscope.Capture:
        with hookscope.capture(net, sites(net), kinds=("grad_input", "grad_output")) as cap:
            loss = net(batch().requires_grad_()).pow(2).sum()
            loss.backward(retain_graph=True)  # each pass recomputes the region again
            loss.backward()
        return cap

    got, ref = twice(net := Net(how)), twice(Net(None))
    for name in sites(net):
        for a, b in zip(got[name].calls, ref[plain(name)].calls, strict=True):
            for kind in ("grad_input", "grad_output"):
                torch.testing.assert_close(a.get(kind), b.get(kind), rtol=0, atol=1e-12)
