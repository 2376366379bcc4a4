"""running: RunningStats against numpy on the concatenated data; merges in any order; round trips."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hookscope.errors import OptionError
from hookscope.stats.float_bins import EDGES, HALF, linear_histogram
from hookscope.stats.streaming import RunningStats

NAN, INF = float("nan"), float("inf")
MAGNITUDES = EDGES[HALF:].numpy()  # 0, then the float32 with bits 1 << 20, 2 << 20, ...


def grid_histogram(values: np.ndarray) -> list[int]:
    """numpy's histogram of the magnitudes of the finite values as float32, negative bins first (reversed)."""
    f32 = np.finfo(np.float32).max
    v = np.clip(values[np.isfinite(values)].astype(np.float64), -f32, f32).astype(np.float32)
    negative = np.signbit(v)
    above = np.histogram(v[~negative], bins=MAGNITUDES)[0]
    below = np.histogram(-v[negative], bins=MAGNITUDES)[0]
    return np.concatenate([below[::-1], above]).tolist()


def assert_matches_numpy(stats: RunningStats, values: np.ndarray) -> None:
    """Every number of ``stats`` against numpy on all the values it saw, concatenated."""
    finite = values[np.isfinite(values)].astype(np.float64)
    assert stats.count == values.size
    assert (stats.nan_count, stats.inf_count) == (np.isnan(values).sum(), np.isinf(values).sum())
    assert stats.zero_count == (values == 0).sum()
    assert stats.n == finite.size
    assert stats.hist.tolist() == grid_histogram(values)
    if not finite.size:
        assert math.isnan(stats.mean) and math.isnan(stats.min)
        return
    scale = max(1.0, float(np.abs(finite).max()))
    assert stats.mean == pytest.approx(finite.mean(), rel=1e-9, abs=1e-12 * scale)
    assert stats.var == pytest.approx(finite.var(), rel=1e-9, abs=1e-12 * scale**2)
    assert (stats.min, stats.max) == (finite.min(), finite.max())
    assert float(stats.all.mean_abs[0]) == pytest.approx(np.abs(finite).mean(), rel=1e-9, abs=1e-12 * scale)


def stream(*tensors: torch.Tensor, channel_dim: int | None = None) -> RunningStats:
    stats = RunningStats(channel_dim=channel_dim)
    for t in tensors:
        stats.update(t)
    return stats


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64])
def test_a_stream_matches_numpy_on_the_concatenated_data(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(n, 3, 4, 4, generator=g) * 5 + 2).to(dtype) for n in (8, 1, 5)]
    stats = stream(*batches)
    assert_matches_numpy(stats, torch.cat(batches).double().numpy())
    assert stats.shape == (8, 3, 4, 4) and stats.dtype == str(dtype).removeprefix("torch.") and stats.updates == 3


def test_nan_inf_zeros_and_empty_tensors_are_counted_and_left_out() -> None:
    x = torch.tensor([1.0, NAN, INF, -INF, 0.0, 0.0, -3.0, 1e13, -1e-15])
    stats = stream(x, torch.empty(0), torch.tensor([NAN]))
    assert_matches_numpy(stats, np.concatenate([x.numpy(), [np.nan]]))
    assert stats.hist[HALF] == 2 and stats.hist.sum() == 6  # +0.0 twice in [0, 2**-129); 1, -3, 1e13, -1e-15
    big = np.flatnonzero(stats.hist.numpy())[-1]
    assert EDGES[big] <= 1e13 < EDGES[big + 1] and (EDGES[big + 1] - EDGES[big]) / EDGES[big] <= 0.125
    nothing = stream(torch.tensor([NAN, INF]))
    assert_matches_numpy(nothing, np.array([np.nan, np.inf]))
    assert nothing.as_dict()["mean"] is None and nothing.as_dict()["histogram"] == {"counts": [], "edges": []}


def test_per_channel_moments_match_numpy() -> None:
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(n, 5, 3, 3, generator=g) * torch.arange(1.0, 6.0)[:, None, None] for n in (4, 7)]
    batches[1][0, 2, 0, 0] = NAN
    stats = stream(*batches, channel_dim=1)
    data = torch.cat(batches).transpose(0, 1).reshape(5, -1).double().numpy()  # (C, N)
    assert stats.channels is not None
    for c in range(5):
        finite = data[c][np.isfinite(data[c])]
        assert int(stats.channels.n[c]) == finite.size
        assert float(stats.channels.mean[c]) == pytest.approx(finite.mean(), rel=1e-10)
        assert float(stats.channels.var[c]) == pytest.approx(finite.var(), rel=1e-10)
        assert (float(stats.channels.min[c]), float(stats.channels.max[c])) == (finite.min(), finite.max())
    last = stream(torch.randn(2, 3, 4), channel_dim=-1)
    assert last.channels is not None and len(last.channels.n) == 4


def test_merge_equals_one_stream_over_every_split() -> None:
    g = torch.Generator().manual_seed(2)
    data = torch.randn(60, 4, generator=g) * 1e3 + 1e6  # a large mean: naive sums would lose digits
    whole = stream(data, channel_dim=1)
    for cuts in ([30], [1, 2, 57], [10, 20, 30, 40, 50]):
        parts = [stream(chunk, channel_dim=1) for chunk in torch.tensor_split(data, cuts)]
        merged = parts[0]
        for part in parts[1:]:
            merged = merged.merge(part)
        assert_matches_numpy(merged, data.numpy())
        assert merged.channels is not None and whole.channels is not None
        assert torch.allclose(merged.channels.m2, whole.channels.m2, rtol=1e-9)
        assert merged.updates == len(parts)
    assert whole.updates == 1  # merge made new objects, changed none


finite_arrays = arrays(
    np.float64, st.integers(0, 40), elements=st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False)
)
any_arrays = arrays(np.float64, st.integers(0, 20), elements=st.floats(allow_subnormal=False, width=32))


@settings(max_examples=60, deadline=None)
@given(a=finite_arrays, b=finite_arrays, c=any_arrays)
def test_merge_is_associative_and_matches_numpy(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    sa, sb, sc = (stream(torch.from_numpy(v)) for v in (a, b, c))
    left, right = sa.merge(sb).merge(sc), sa.merge(sb.merge(sc))
    assert torch.equal(left.counts, right.counts) and torch.equal(left.hist, right.hist)
    assert (left.n, left.min, left.max) == (right.n, right.min, right.max) or left.n == 0
    scale = max([1.0, *np.abs(np.concatenate([a, b, c])[np.isfinite(np.concatenate([a, b, c]))]).tolist()])
    if left.n:
        assert left.mean == pytest.approx(right.mean, rel=1e-9, abs=1e-12 * scale)
        assert left.var == pytest.approx(right.var, rel=1e-9, abs=1e-9 * scale**2)
    assert_matches_numpy(left, np.concatenate([a, b, c]))


def test_to_tensors_round_trips_exactly() -> None:
    stats = stream(torch.randn(3, 2, 5), torch.tensor([[[NAN] * 5] * 2]), channel_dim=1)
    back = RunningStats.from_tensors(stats.to_tensors(), channel_dim=1)
    for name, tensor in stats.to_tensors().items():
        assert torch.equal(back.to_tensors()[name], tensor), name
    assert back.mean == stats.mean and back.count == stats.count and back.updates == 2


def test_as_dict_has_the_summary_keys_and_a_linear_histogram() -> None:
    x = torch.linspace(-2, 6, 1001)
    d = RunningStats().update(x).as_dict(bins=8)
    assert set(d) >= {"count", "mean", "std", "min", "max", "mean_abs", "l2", "zero_fraction", "nan_count"}
    assert d["l2"] == pytest.approx(float(torch.linalg.vector_norm(x.double())))
    counts, edges = d["histogram"]["counts"], d["histogram"]["edges"]
    assert edges == pytest.approx(np.linspace(-2, 6, 9).tolist())
    assert sum(counts) == pytest.approx(1001)
    truth = np.histogram(x.numpy(), bins=np.linspace(-2, 6, 9))[0]
    assert counts == pytest.approx(truth.tolist(), abs=0.3 * truth.max())  # a picture, not exact counts


def test_linear_histogram_keeps_values_that_sit_on_a_grid_edge() -> None:
    stats = RunningStats().update(torch.tensor([0.5, 1.0, 1.0]))  # 1.0 == 10**0 is an edge of the grid
    counts, _ = linear_histogram(stats.hist, 0.5, 1.0, 4)
    assert sum(counts) == pytest.approx(3) and counts[-1] >= 2
    one, _ = linear_histogram(RunningStats().update(torch.tensor([2.0, 2.0])).hist, 2.0, 2.0, 3)
    assert sum(one) == pytest.approx(2)


def test_errors_say_what_was_expected() -> None:
    with pytest.raises(OptionError, match="same channels every time"):
        stream(torch.randn(2, 3), torch.randn(2, 4), channel_dim=1)
    with pytest.raises(OptionError, match="need a tensor with that dimension"):
        stream(torch.randn(5), channel_dim=1)
    with pytest.raises(OptionError, match="cannot merge statistics per channel"):
        RunningStats(channel_dim=1).merge(RunningStats())
    with pytest.raises(OptionError, match=r"expects a real torch\.Tensor, got list"):
        RunningStats().update([1.0])  # type: ignore[arg-type]
