"""The optimizer phase's readings: every tensor's (level, max |x|), one stack per device and dtype, exactly
what reading each tensor alone with ``finite.extremes`` gives (the previous way, the reference here)."""

from __future__ import annotations

import math

import torch

from hookscope.train import finite
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
