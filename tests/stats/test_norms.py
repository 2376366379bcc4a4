"""Sums of squares against float64 arithmetic, on tensors long enough for a float32 2-norm to drift."""

from __future__ import annotations

import pytest
import torch

from hookscope.stats.norms import ROW, square_sum, squared_norm


def exact(t: torch.Tensor) -> float:
    return float(t.double().square().sum())


@pytest.mark.parametrize(
    "shape", [(0,), (7,), (ROW,), (3 * ROW + 5,), (512, 512, 3, 3), (64, 3, 7, 7)], ids=lambda s: "x".join(map(str, s))
)
def test_a_sum_of_squares_is_exact_to_1e_6(shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    t = torch.randn(shape) * 0.02 + 0.001
    assert float(square_sum(t)) == pytest.approx(exact(t), rel=1e-6, abs=1e-30)
    assert square_sum(t).dtype == torch.float64


def test_where_a_float32_norm_drifts_the_rows_do_not() -> None:
    torch.manual_seed(0)
    t = torch.randn(8_000_000) * 0.02 + 0.001
    drift = abs(float(torch.linalg.vector_norm(t)) ** 2 - exact(t)) / exact(t)
    assert drift > 1e-5  # why this module exists: if torch ever fixes it, this says so
    assert float(square_sum(t)) == pytest.approx(exact(t), rel=1e-6)


def test_views_half_precision_and_several_tensors() -> None:
    torch.manual_seed(1)
    a, b = torch.randn(64, 3, 7, 7).transpose(0, 1), torch.randn(100, dtype=torch.float16)
    assert float(square_sum(a)) == pytest.approx(exact(a), rel=1e-6)
    assert float(square_sum(b)) == pytest.approx(exact(b), rel=1e-6)
    total = squared_norm([a, torch.randn(5), b])
    assert total is not None and squared_norm([]) is None
    assert float(squared_norm([a, a])) == pytest.approx(2 * exact(a), rel=1e-6)
