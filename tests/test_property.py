"""Property tests: what hookscope captures equals what an independent oracle computes.

Hypothesis builds small random float64 models out of Linear, Tanh, ReLU, ReLU(inplace=True),
Identity, Dropout (eval) and LayerNorm: plain sequential stacks, and a branching model whose
two branches are added and whose shared block is reused in a residual ``h = h + shared(h)``
(so its leaves are called several times). Every leaf module is captured with ``input``,
``output``, ``grad_input`` and ``grad_output``.

The oracle never uses hookscope. It runs a deep copy of the model in which every in-place
module is switched to its out-of-place twin (``relu_`` and ``relu`` compute the same values,
and the generator only puts an in-place ReLU where nothing else reads the tensor it
overwrites), records with plain forward hooks what each leaf received and returned, and
takes the gradients with one ``torch.autograd.grad(loss, [those tensors])``. Since nothing in
the oracle run is modified in place, the recorded references are the values each module saw,
and ``autograd.grad`` on them is d loss / d that tensor.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

import hookscope

DTYPE = torch.float64
KINDS = ("input", "output", "grad_input", "grad_output")

LAYERS = ("linear", "tanh", "relu", "relu_inplace", "identity", "dropout", "layernorm")
ALIASING = frozenset({"identity", "dropout"})  # return their input tensor itself (eval-mode Dropout)
# relu_ may only overwrite a tensor that no other op reads afterwards: the output of Linear or
# LayerNorm (neither saves its output for backward), reached through aliasing layers only, and
# never a block's input (a branch's input is also read by the other branch or the residual add).
FRESH = frozenset({"linear", "layernorm"})


# -- random models -----------------------------------------------------------------------------


@st.composite
def layer_stacks(draw: st.DrawFn, min_size: int = 0, max_size: int = 4) -> list[str]:
    """Layer names for one ``nn.Sequential``; ``relu_inplace`` only where it is safe (see FRESH)."""
    names: list[str] = []
    fresh = False
    for _ in range(draw(st.integers(min_size, max_size))):
        choices = [n for n in LAYERS if n != "relu_inplace"] + (["relu_inplace"] * 3 if fresh else [])
        name = draw(st.sampled_from(choices))  # weighted: relu_inplace is the interesting case
        if name not in ALIASING:
            fresh = name in FRESH
        names.append(name)
    return names


def make_layer(name: str, width: int) -> nn.Module:
    factories: dict[str, Callable[[], nn.Module]] = {
        "linear": lambda: nn.Linear(width, width),
        "tanh": nn.Tanh,
        "relu": nn.ReLU,
        "relu_inplace": lambda: nn.ReLU(inplace=True),
        "identity": nn.Identity,
        "dropout": lambda: nn.Dropout(p=0.5),
        "layernorm": lambda: nn.LayerNorm(width),
    }
    return factories[name]()


def make_stack(names: list[str], width: int) -> nn.Sequential:
    return nn.Sequential(*(make_layer(n, width) for n in names))


class Branchy(nn.Module):
    """``pre``, then ``left(h) + right(h)``, then ``h = h + shared(h)`` ``repeats`` times, then ``post``."""

    def __init__(self, blocks: dict[str, nn.Sequential], repeats: int) -> None:
        super().__init__()
        self.pre, self.left, self.right = blocks["pre"], blocks["left"], blocks["right"]
        self.shared, self.post = blocks["shared"], blocks["post"]
        self.repeats = repeats

    def forward(self, x: Tensor) -> Tensor:
        h = self.pre(x)
        h = self.left(h) + self.right(h)
        for _ in range(self.repeats):
            h = h + self.shared(h)
        return self.post(h)


@dataclass
class Case:
    """One drawn example: a model (eval mode, float64), an input, and the loss weights."""

    model: nn.Module
    x: Tensor
    weights: Tensor
    description: str = ""


def make_case(build: Callable[[int], nn.Module], seed: int, width: int, batch: int, description: str) -> Case:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build(width).to(DTYPE).eval()
        x = torch.randn(batch, width, dtype=DTYPE, requires_grad=True)
        weights = torch.randn(batch, width, dtype=DTYPE)
    return Case(model, x, weights, description)


@st.composite
def sequential_cases(draw: st.DrawFn) -> Case:
    names = draw(layer_stacks(min_size=1, max_size=6))
    seed, width, batch = draw(st.integers(0, 2**31 - 1)), draw(st.integers(2, 5)), draw(st.integers(1, 3))
    return make_case(lambda w: make_stack(names, w), seed, width, batch, f"Sequential{names}")


@st.composite
def branchy_cases(draw: st.DrawFn) -> Case:
    stacks = {block: draw(layer_stacks()) for block in ("pre", "left", "right", "post")}
    stacks["shared"] = draw(layer_stacks(min_size=1))
    repeats = draw(st.integers(2, 3))
    seed, width, batch = draw(st.integers(0, 2**31 - 1)), draw(st.integers(2, 5)), draw(st.integers(1, 3))

    def build(w: int) -> nn.Module:
        return Branchy({block: make_stack(names, w) for block, names in stacks.items()}, repeats)

    return make_case(build, seed, width, batch, f"Branchy{stacks} x{repeats}")


# -- the oracle --------------------------------------------------------------------------------


@dataclass
class Expected:
    """Per leaf, per call (in call order): what it received, returned, and their gradients."""

    calls: dict[str, list[dict[str, Tensor]]]
    return_order: list[str]  # leaf names in the order their calls returned
    result: Tensor
    param_grads: dict[str, Tensor]


def leaf_names(model: nn.Module) -> list[str]:
    return [name for name, module in model.named_modules() if next(module.children(), None) is None]


def loss_of(y: Tensor, weights: Tensor) -> Tensor:
    return (y * weights).sum()


def oracle(case: Case) -> Expected:
    """Run an out-of-place copy of the model with plain hooks; gradients by ``autograd.grad``."""
    model = copy.deepcopy(case.model)
    for module in model.modules():
        if getattr(module, "inplace", False):
            module.inplace = False
    modules = dict(model.named_modules())
    seen: dict[str, list[tuple[Tensor, Tensor]]] = {name: [] for name in leaf_names(model)}
    order: list[str] = []

    def record(name: str, module: nn.Module, args: tuple[Tensor, ...], output: Tensor) -> None:
        seen[name].append((args[0], output))
        order.append(name)

    handles = [modules[n].register_forward_hook(lambda m, a, o, n=n: record(n, m, a, o)) for n in seen]
    try:
        x = case.x.detach().clone().requires_grad_()
        result = model(x)
    finally:
        for handle in handles:
            handle.remove()
    recorded = [t for pairs in seen.values() for pair in pairs for t in pair]
    assert all(t._version == 0 for t in recorded), "the oracle run modified a recorded tensor in place"
    params = dict(model.named_parameters())
    grads = iter(torch.autograd.grad(loss_of(result, case.weights), recorded + list(params.values())))
    calls = {
        name: [{"input": i, "output": o, "grad_input": next(grads), "grad_output": next(grads)} for i, o in pairs]
        for name, pairs in seen.items()
    }
    return Expected(calls, order, result.detach(), {n: next(grads) for n in params})


# -- the property ------------------------------------------------------------------------------


def check_capture_matches_oracle(case: Case) -> hookscope.Capture:
    """Capture every leaf of ``case.model``, compare it all with the oracle, return the capture."""
    expected = oracle(case)
    model, x = case.model, case.x
    with hookscope.capture(model, kinds=KINDS) as cap:
        result = model(x)
        loss_of(result, case.weights).backward()

    assert hookscope.find_hooks(model) == []
    assert not x._backward_hooks, "a tensor hook outlived the block on the input"
    torch.testing.assert_close(result.detach(), expected.result, rtol=0, atol=0)
    for name, param in model.named_parameters():  # hookscope's hooks did not change any gradient
        torch.testing.assert_close(param.grad, expected.param_grads[name])

    assert list(cap) == list(expected.calls)
    for name, want_calls in expected.calls.items():
        calls = cap[name].calls
        assert len(calls) == len(want_calls), name
        for k, (call, want) in enumerate(zip(calls, want_calls, strict=True)):
            assert call.index == k
            for kind in KINDS:
                key = "args[0]" if kind in ("input", "grad_input") else "out"
                assert call.keys(kind) == [key], (name, k, kind)
                got = call.get(kind, key)
                assert got.grad_fn is None and not got.requires_grad  # detach=True
                torch.testing.assert_close(got, want[kind], msg=lambda m, n=name, k=k, c=kind: f"{n}#{k} {c}: {m}")
            assert call.missing == {} and call.error is None
        if len(calls) == 1:
            torch.testing.assert_close(cap[name].output, want_calls[0]["output"])
            torch.testing.assert_close(cap[name].grad_input, want_calls[0]["grad_input"])
        else:
            with pytest.raises(hookscope.AmbiguousCallError, match=r"called \d+ times"):
                _ = cap[name].output

    by_return = sorted((call for record in cap.values() for call in record.calls), key=lambda c: c.order)
    assert [call.site for call in by_return] == expected.return_order
    return cap


@settings(max_examples=25, deadline=None)
@given(sequential_cases())
def test_sequential_stack_matches_oracle(case: Case) -> None:
    """Every leaf of a random Sequential: input, output, grad_input, grad_output equal the oracle's."""
    check_capture_matches_oracle(case)


@settings(max_examples=25, deadline=None)
@given(branchy_cases())
def test_branching_and_reused_modules_match_oracle(case: Case) -> None:
    """Added branches and a block called 2-3 times: every call, in call order, equals the oracle's."""
    cap = check_capture_matches_oracle(case)
    assert isinstance(case.model, Branchy)
    shared = [name for name in cap if name.startswith("shared")]
    assert shared
    assert {len(cap[name].calls) for name in shared} == {case.model.repeats}


def test_inplace_relu_keeps_pre_and_post_values() -> None:
    """Fixed example: Linear -> ReLU(inplace) stores Linear's output before relu_ overwrote it."""
    case = make_case(lambda w: make_stack(["linear", "relu_inplace", "linear"], w), 0, 4, 3, "fixed")
    check_capture_matches_oracle(case)
