"""A property test: for random small MLPs and random edits, ``edit`` + forward equals the hand-edited
forward (the MLP run layer by layer, the edit applied by hand at its place), and no hook is left."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

import hookscope
from hookscope import edits

D = torch.float64


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[int], int, str, str, int]:
    widths = draw(st.lists(st.integers(1, 5), min_size=2, max_size=4))
    layer = draw(st.integers(0, len(widths) - 2))
    kind = draw(st.sampled_from(["input", "output"]))
    how = draw(st.sampled_from(["zero", "scale", "add", "clamp", "function"]))
    unit = draw(st.integers(0, 4))
    return widths, layer, kind, how, unit


def mlp(widths: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers).to(D)


def by_hand(how: str, unit: int, t: Tensor) -> Tensor:
    u = unit % t.shape[-1]
    if how == "zero":
        t = t.clone()
        t[:, u] = 0
        return t
    if how == "scale":
        return t * -1.5
    if how == "add":
        return t + torch.arange(t.shape[-1], dtype=D)
    if how == "clamp":
        return t.clamp(min=-0.1, max=0.2)
    return t.sin()


def op(how: str, unit: int, kind: Any, width: int) -> Any:
    return {
        "zero": lambda: edits.zero(units=[unit % width], kind=kind),
        "scale": lambda: edits.scale(-1.5, kind=kind),
        "add": lambda: edits.add(torch.arange(width, dtype=D), kind=kind),
        "clamp": lambda: edits.clamp(-0.1, 0.2, kind=kind),
        "function": lambda: edits.function(lambda t, call: t.sin(), kind=kind),
    }[how]()


@settings(max_examples=30, deadline=None)
@given(cases(), st.integers(0, 2**16))
def test_edit_and_forward_equal_the_hand_edited_forward(case: tuple[list[int], int, str, str, int], seed: int) -> None:
    widths, layer, kind, how, unit = case
    torch.manual_seed(seed)
    model = mlp(widths)
    x = torch.randn(3, widths[0], dtype=D)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    width = linears[layer].in_features if kind == "input" else linears[layer].out_features
    site = str(list(model).index(linears[layer]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hookscope.EditWarning)  # a clamp may find nothing to clamp
        with hookscope.edit(model, {site: op(how, unit, kind, width)}, strict=False):
            got = model(x)
    h = x
    for i, linear in enumerate(linears):
        if i == layer and kind == "input":
            h = by_hand(how, unit, h)
        h = F.linear(h, linear.weight, linear.bias)
        if i == layer and kind == "output":
            h = by_hand(how, unit, h)
        if i < len(linears) - 1:
            h = F.relu(h)
    torch.testing.assert_close(got, h, rtol=0, atol=1e-12)
    assert hookscope.find_hooks(model) == []
