"""Each edit against the same network rewritten by hand (the edited computation written out), in float64.

The network (``Net``) holds a module returning a tuple, one returning a dict and taking a keyword
argument, a Linear called twice (a shared module) and a head. ``hand(net, x, mask, ...)`` is the
same computation written with torch.nn.functional on the net's own weights, with each edit put
in by hand at its place; gradients are checked against ``torch.autograd.grad`` of that graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import hookscope
from hookscope import edits

D = torch.float64
Hand = Callable[[Any], Any]


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.lin(x)
        return h.tanh(), h.sigmoid()


class Keyed(nn.Module):
    def forward(self, x: Tensor, *, mask: Tensor) -> dict[str, Tensor]:
        return {"a": x * mask, "b": x + 1}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pair, self.keyed, self.shared, self.head = Pair(), Keyed(), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        a, b = self.pair(x)
        d = self.keyed(a + b, mask=mask)
        h = self.shared(self.shared(d["a"] * d["b"]))
        return self.head(h)


def hand(net: Net, x: Tensor, mask: Tensor, at: dict[str, Hand] | None = None) -> Tensor:
    """``Net`` written out; ``at[place](value)`` edits the value at that place."""
    at = at or {}

    def put(place: str, value: Any) -> Any:
        return at[place](value) if place in at else value

    h = F.linear(put("pair.in", x), net.pair.lin.weight, net.pair.lin.bias)
    a, b = put("pair.out", (h.tanh(), h.sigmoid()))
    inner, mask = put("keyed.in", (a + b, mask))
    d = put("keyed.out", {"a": inner * mask, "b": inner + 1})
    s0 = put("shared.0", F.linear(d["a"] * d["b"], net.shared.weight, net.shared.bias))
    s1 = put("shared.1", F.linear(s0, net.shared.weight, net.shared.bias))
    return F.linear(put("head.in", s1), net.head.weight, net.head.bias)


def grad_scaled(t: Tensor, factor: float) -> Tensor:
    """``t`` in value; its gradient multiplied by ``factor`` (the hand-made grad_output edit)."""
    return t.detach() + factor * (t - t.detach())


@pytest.fixture
def net() -> Net:
    torch.manual_seed(0)
    return Net().to(D)


@pytest.fixture
def inputs() -> tuple[Tensor, Tensor]:
    torch.manual_seed(1)
    return torch.randn(3, 4, dtype=D), (torch.rand(3, 4) > 0.3).to(D)


VECTOR = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=D)
CASES: list[tuple[str, dict[Any, Any], dict[str, Hand]]] = [
    ("tuple out[1] scale", {"pair": edits.scale(0.5, key="out[1]")}, {"pair.out": lambda v: (v[0], v[1] * 0.5)}),
    (
        "tuple out[0] zero units",
        {"pair": edits.zero(units=[1, 3], key="out[0]")},
        {"pair.out": lambda v: (v[0] * torch.tensor([1.0, 0, 1, 0]), v[1])},
    ),
    (
        "dict add",
        {"keyed": edits.add(VECTOR, key="out['a']")},
        {"keyed.out": lambda d: {"a": d["a"] + VECTOR, "b": d["b"]}},
    ),
    (
        "dict clamp",
        {"keyed": edits.clamp(max=0.9, key="out['b']")},
        {"keyed.out": lambda d: {"a": d["a"], "b": d["b"].clamp(max=0.9)}},
    ),
    (
        "input kwarg",
        {"keyed": edits.replace(torch.ones(3, 4), kind="input", key="kwargs.mask")},
        {"keyed.in": lambda v: (v[0], torch.ones(3, 4))},
    ),
    (
        "input positional",
        {"keyed": edits.scale(2.0, kind="input", key="args[0]")},
        {"keyed.in": lambda v: (v[0] * 2, v[1])},
    ),
    (
        "input one tensor",
        {"head": edits.zero(units=[0], kind="input")},
        {"head.in": lambda v: v * torch.tensor([0.0, 1, 1, 1])},
    ),
    ("shared second call only", {"shared": edits.add(1.0, call=1)}, {"shared.1": lambda v: v + 1.0}),
    (
        "shared first call only",
        {"shared": edits.mean(call=0)},
        {"shared.0": lambda v: v.mean(0, keepdim=True).expand_as(v)},
    ),
    (
        "function",
        {"shared": lambda t, call: t * (call + 2)},
        {"shared.0": lambda v: v * 2, "shared.1": lambda v: v * 3},
    ),
    (
        "two edits in order",
        {"head": [edits.scale(3.0, kind="input"), edits.add(-1.0, kind="input")]},
        {"head.in": lambda v: v * 3 - 1},
    ),
]


@pytest.mark.parametrize(("name", "plan", "at"), CASES, ids=[c[0] for c in CASES])
def test_an_edit_equals_the_network_edited_by_hand(
    net: Net, inputs: tuple[Tensor, Tensor], name: str, plan: dict[Any, Any], at: dict[str, Hand]
) -> None:
    x, mask = inputs
    x_before, weights = x.clone(), {k: v.clone() for k, v in net.state_dict().items()}
    leaves = [x.requires_grad_(), *net.parameters()]
    with hookscope.edit(net, plan):
        y = net(x, mask)
        got = torch.autograd.grad(y.square().sum(), leaves)
    expected_y = hand(net, x, mask, at)
    expected = torch.autograd.grad(expected_y.square().sum(), leaves)
    torch.testing.assert_close(y, expected_y, rtol=0, atol=1e-12)
    for g, e in zip(got, expected, strict=True):  # gradient flows through every edited value
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
    assert torch.equal(x.detach(), x_before) and hookscope.find_hooks(net) == []
    assert all(torch.equal(v, weights[k]) for k, v in net.state_dict().items())


GRAD_CASES: list[tuple[str, dict[Any, Any], dict[str, Hand]]] = [
    (
        "tuple out[0]",
        {"pair": edits.scale(3.0, kind="grad_output", key="out[0]")},
        {"pair.out": lambda v: (grad_scaled(v[0], 3.0), v[1])},
    ),
    (
        "dict out['b']",
        {"keyed": edits.scale(-1.0, kind="grad_output", key="out['b']")},
        {"keyed.out": lambda d: {"a": d["a"], "b": grad_scaled(d["b"], -1.0)}},
    ),
    (
        "second call of a shared module",
        {"shared": edits.zero(kind="grad_output", call=1)},
        {"shared.1": lambda v: grad_scaled(v, 0.0)},
    ),
    (
        "output and its gradient",
        {"shared": [edits.add(0.5, call=0), edits.scale(2.0, kind="grad_output", call=0)]},
        {"shared.0": lambda v: grad_scaled(v + 0.5, 2.0)},
    ),
]


@pytest.mark.parametrize(("name", "plan", "at"), GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_a_gradient_edit_equals_autograd_of_the_hand_edited_graph(
    net: Net, inputs: tuple[Tensor, Tensor], name: str, plan: dict[Any, Any], at: dict[str, Hand]
) -> None:
    x, mask = inputs
    leaves = [x.requires_grad_(), *net.parameters()]
    with hookscope.edit(net, plan) as ed:
        y = net(x, mask)
        got = torch.autograd.grad(y.square().sum(), leaves)
    expected_y = hand(net, x, mask, at)
    expected = torch.autograd.grad(expected_y.square().sum(), leaves)
    torch.testing.assert_close(y, expected_y, rtol=0, atol=1e-12)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
    assert all(row.calls for row in ed.report())


def test_an_edit_at_a_conv_is_what_a_following_inplace_relu_sees() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(inplace=True), nn.Conv2d(3, 1, 1)).to(D)
    x = torch.randn(2, 2, 6, 6, dtype=D, requires_grad=True)
    with hookscope.edit(model, {"0": edits.scale(-1.0)}) as ed:
        y = model(x)
        got = torch.autograd.grad(y.sum(), x)[0]
    conv = F.conv2d(x, model[0].weight, model[0].bias)
    expected_y = F.conv2d(F.relu(-conv), model[2].weight, model[2].bias)
    torch.testing.assert_close(y, expected_y, rtol=0, atol=1e-12)
    torch.testing.assert_close(got, torch.autograd.grad(expected_y.sum(), x)[0], rtol=0, atol=1e-12)
    row = ed.report()[0]  # figures read before the ReLU overwrote the edited tensor: |-y - y| / |y| = 2
    assert (row.changed, row.elements, row.calls) == (int((conv != 0).sum()), conv.numel(), (0,))
    assert row.relative == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize(
    "plan", [{"0": edits.add(1.0)}, {"0": edits.scale(2.0, kind="input")}], ids=["output", "input"]
)
def test_an_edit_never_writes_into_the_callers_tensor(plan: dict[str, Any]) -> None:
    """Identity returns the caller's tensor itself, and an in-place ReLU follows it."""
    model = nn.Sequential(nn.Identity(), nn.ReLU(inplace=True))
    x = torch.randn(4, 5, dtype=D)
    kept = x.clone()
    with hookscope.edit(model, plan):
        y = model(x)
    torch.testing.assert_close(y, F.relu(x + 1.0) if "0" in plan and plan["0"].kind == "output" else F.relu(2 * x))
    assert torch.equal(x, kept)


def test_report_figures_against_a_hand_computation() -> None:
    model = nn.Sequential(nn.Identity())
    x = torch.arange(24.0, dtype=D).reshape(2, 3, 4) - 5  # one zero (at 5), negatives and positives
    with hookscope.edit(model, {"0": [edits.zero(channels=[0, 2]), edits.clamp(min=0.0)]}) as ed:
        model(x)
        model(x * 2)
    zero, clamp = ed.report()
    picked = x[:, [0, 2]]
    assert zero.calls == (0, 1) and zero.elements == 2 * x.numel()
    assert zero.changed == 2 * int((picked != 0).sum())
    assert zero.relative == pytest.approx(float(picked.norm() / x.norm()), rel=1e-12)  # same ratio for x and 2x
    after = x.clone()
    after[:, [0, 2]] = 0
    assert clamp.changed == 2 * int((after < 0).sum())
    assert clamp.relative == pytest.approx(float(after.clamp(max=0).norm() / after.norm()), rel=1e-12)
    assert zero.note == clamp.note == "" and "zero(channels=[0, 2])" in str(ed.report())


def test_mean_ablation_from_running_stats_per_channel_and_from_a_statistics_table() -> None:
    model = nn.Sequential(nn.Identity())
    data = torch.randn(50, 3, 2, 2, dtype=D) + torch.tensor([1.0, -2.0, 5.0], dtype=D).reshape(1, 3, 1, 1)
    per_channel = hookscope.RunningStats(channel_dim=1).update(data)
    table = {("0", "output", "out"): hookscope.RunningStats().update(data)}
    x = torch.randn(2, 3, 2, 2, dtype=D)
    with hookscope.edit(model, {"0": edits.mean(per_channel, channels=[1])}):
        y = model(x)
    expected = x.clone()
    expected[:, 1] = data[:, 1].mean()
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-12)
    with hookscope.edit(model, {"0": edits.mean(table)}):
        torch.testing.assert_close(model(x), torch.full_like(x, float(data.mean())), rtol=0, atol=1e-12)


def test_replace_from_a_capture_patches_a_run_with_another(net: Net, inputs: tuple[Tensor, Tensor]) -> None:
    x, mask = inputs
    with hookscope.capture(net, ["keyed", "shared"]) as clean:
        clean_y = net(x, mask)
    other = torch.randn(3, 4, dtype=D)
    with hookscope.edit(net, {"shared": edits.replace(clean, call=1)}):
        torch.testing.assert_close(net(other, mask), clean_y, rtol=0, atol=1e-12)  # the last shared call decides
    with hookscope.edit(net, {"keyed": edits.replace(clean, key="out['a']", positions=[0])}):
        got = net(other, mask)
    at = {"keyed.out": lambda d: {"a": torch.cat([clean["keyed"].output["a"][:, :1], d["a"][:, 1:]], 1), "b": d["b"]}}
    torch.testing.assert_close(got, hand(net, other, mask, at), rtol=0, atol=1e-12)


def test_a_capture_inside_the_edit_block_sees_the_edited_values() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    x = torch.randn(2, 3, requires_grad=True)
    with hookscope.edit(model, {"0": edits.scale(2.0)}), hookscope.capture(model, "0", kinds=("output",)) as inside:
        model(x)
    with hookscope.capture(model, "0") as outside, hookscope.edit(model, {"0": edits.scale(2.0)}):
        model(x)
    torch.testing.assert_close(inside["0"].output, 2 * outside["0"].output)
