"""The optimizer phase's readings: every tensor's (level, max |x|), one stack per device and dtype, exactly
what reading each tensor alone with ``finite.extremes`` gives (the previous way, the reference here)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

import hookscope
from hookscope import NonFiniteWarning
from hookscope.train import finite, params
from hookscope.train.params import _after_levels, _levels


def _one_by_one(tensors: list[torch.Tensor | None]) -> list[tuple[int, float]]:
    out = []
    for t in tensors:
        if t is None or not finite.checkable(t):
            out.append((finite.FINITE, 0.0))
            continue
        low, high = finite.extremes(t).double().tolist()
        out.append((finite.level(low, high), finite.absmax(low, high)))
    return out


def test_levels_of_mixed_dtypes_equal_one_reading_per_tensor() -> None:
    torch.manual_seed(0)
    nan_inside, inf_inside, neg_inf = torch.randn(5, 3), torch.randn(7), torch.randn(4, 4).double()
    nan_inside[2, 1], inf_inside[6], neg_inf[0, 3] = math.nan, math.inf, -math.inf
    tensors: list[torch.Tensor | None] = [
        torch.randn(3, 4) * 1e30,
        nan_inside,
        None,
        torch.randn(6).half(),
        inf_inside,
        torch.empty(0),
        torch.arange(5),  # integers hold no NaN: finite, not read
        torch.randn(3, dtype=torch.complex64),
        neg_inf,
        torch.randn(2, 2).bfloat16(),
        torch.tensor(-3.5),
    ]
    got, expected = _levels(tensors), _one_by_one(tensors)
    assert [level for level, _ in got] == [level for level, _ in expected]
    assert [level for level, _ in got] == [0, 2, 0, 0, 1, 0, 0, 0, 1, 0, 0]
    for (_, a), (_, b) in zip(got, expected, strict=True):
        assert a == b or (math.isnan(a) and math.isnan(b))  # bit for bit, NaN where the tensor holds one
    assert got[-1] == (finite.FINITE, 3.5)


def test_after_levels_from_sums_equal_the_extremes_levels() -> None:
    """The post-step check sums first; its levels are the extremes' (a sum that overflows is read again)."""
    torch.manual_seed(0)
    nan_inside, inf_inside, both = torch.randn(5, 3), torch.randn(7), torch.randn(9).double()
    nan_inside[2, 1], inf_inside[6], both[0], both[1] = math.nan, math.inf, math.inf, -math.inf
    overflows = torch.full((4,), 3e38)  # finite values whose float32 sum is inf: finite all the same
    tensors = [
        torch.randn(3, 4) * 1e30,
        nan_inside,
        overflows,
        torch.randn(6).half(),
        inf_inside,
        torch.empty(0),
        torch.arange(5),
        torch.randn(3, dtype=torch.complex64),
        both,
        torch.tensor([math.nan, 1.0]).bfloat16(),
        torch.tensor(-3.5),
    ]
    assert not math.isfinite(overflows.sum().item())
    got = _after_levels(tensors)
    assert got == [level for level, _ in _one_by_one(list(tensors))]
    assert got == [0, 2, 0, 0, 1, 0, 0, 0, 1, 2, 0]


def _findings(lr: float, start: float) -> list[tuple[str, tuple[object, ...]]]:
    """Six guarded SGD steps of one weight of 4 elements starting at ``start``: what the guard says of each."""
    model = nn.Sequential(nn.Linear(4, 1, bias=False))
    nn.init.constant_(model[0].weight, start)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    with (
        pytest.warns(NonFiniteWarning) if lr != 1.0 else warnings.catch_warnings(),
        hookscope.nan_guard(model, opt, mode="warn") as guard,
    ):
        for _ in range(6):
            opt.zero_grad()
            model(torch.tensor([[1.0, 0.0, 0.0, 0.0]])).sum().backward()  # the first weight moves by -lr a step
            opt.step()
    return [
        (str(err), (err.step, err.phase, err.module, err.kind, err.key, err.value, err.count, err.numel))
        for err in guard.findings
    ]


@pytest.mark.parametrize(
    ("lr", "start"),
    [(1e38, 1.0), (math.nan, 1.0), (1.0, 3e38)],  # overflows to -inf; becomes NaN; sums overflow, weights finite
)
def test_the_optimizer_findings_equal_the_extremes_path(
    lr: float, start: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = _findings(lr, start)
    monkeypatch.setattr(params, "_after_levels", lambda ps: [level for level, _ in _levels(ps)])  # the former read
    assert new == _findings(lr, start)
    if start == 3e38:
        assert new == []  # 4 x 3e38 sums to inf in float32: read again to its extremes, finite: no finding
    else:
        assert new[0][1][:5] == (3 if lr == 1e38 else 0, "optimizer", "0", "param", "weight")
