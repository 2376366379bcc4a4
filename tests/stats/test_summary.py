"""stats: every number checked against numpy (or a hand computation), NaN/Inf/empty edge cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from torch import Tensor, nn

import hookscope
from hookscope.core.records import forward_order
from hookscope.errors import HookscopeError
from hookscope.stats.gradient_flow import gradient_flow
from hookscope.stats.summary import PERCENTILES, Summary, summarize
from tests.models import SharedCell

NAN, INF = float("nan"), float("inf")


def assert_matches_numpy(summary: Summary, values: np.ndarray, bins: int) -> None:
    """Every statistic of ``summary`` against numpy on the finite values of ``values``."""
    finite = values[np.isfinite(values)].astype(np.float64)
    assert summary.count == values.size
    assert summary.nan_count == np.isnan(values).sum()
    assert summary.inf_count == np.isinf(values).sum()
    assert summary.zero_fraction == pytest.approx((values == 0).sum() / values.size)
    scale = max(1.0, float(np.abs(finite).max()))
    close = {"rel": 1e-9, "abs": 1e-12 * scale}
    assert summary.mean == pytest.approx(np.mean(finite), **close)
    assert summary.std == pytest.approx(np.std(finite), **close)  # population std, ddof=0
    assert (summary.min, summary.max) == (finite.min(), finite.max())
    assert summary.mean_abs == pytest.approx(np.mean(np.abs(finite)), **close)
    assert summary.l2 == pytest.approx(np.linalg.norm(finite), **close)
    oracle = np.percentile(finite, list(summary.percentiles))
    assert list(summary.percentiles.values()) == pytest.approx(oracle.tolist(), **close)
    counts, edges = np.histogram(finite, bins=bins, range=(finite.min(), finite.max()))
    assert summary.histogram.edges == edges.tolist()  # bit for bit
    assert summary.histogram.counts == counts.tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1000,), (4, 3, 8, 8), (7, 1)])
def test_summarize_matches_numpy(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    x = (torch.randn(shape) * 3 + 1).to(dtype)
    summary = summarize(x, bins=20)
    values = x.double().numpy()
    assert_matches_numpy(summary, values, bins=20)
    assert summary.percentiles.keys() == set(PERCENTILES)


@settings(max_examples=80, deadline=None)
@given(
    values=arrays(
        np.float64,
        st.integers(1, 300),
        elements=st.one_of(st.floats(-1e6, 1e6), st.integers(-3, 3).map(float), st.sampled_from([NAN, INF, -INF])),
    ),
    bins=st.integers(1, 40),
    percentiles=st.lists(st.floats(0, 100), max_size=5, unique=True),
)
def test_summarize_property(values: np.ndarray, bins: int, percentiles: list[float]) -> None:
    """Any mix of floats, small integers (ties on bin edges), NaN and ±Inf: numpy agrees."""
    summary = summarize(torch.from_numpy(values), bins=bins, percentiles=percentiles)
    if np.isfinite(values).any():
        assert_matches_numpy(summary, values, bins)
        assert sum(summary.histogram.counts) == np.isfinite(values).sum()
    else:
        assert math.isnan(summary.mean) and summary.histogram.counts == []


def test_nan_and_inf_are_counted_and_left_out() -> None:
    summary = summarize(torch.tensor([1.0, NAN, INF, -INF, 0.0, 2.0, NAN]), bins=2)
    assert (summary.count, summary.nan_count, summary.inf_count) == (7, 2, 2)
    assert (summary.mean, summary.min, summary.max) == (1.0, 0.0, 2.0)
    assert summary.l2 == pytest.approx(math.sqrt(5))
    assert summary.std == pytest.approx(math.sqrt(2 / 3))
    assert summary.zero_fraction == pytest.approx(1 / 7)
    assert summary.histogram == summarize(torch.tensor([0.0, 1.0, 2.0]), bins=2).histogram
    assert summary.histogram.counts == [1, 2]  # [0, 1) and [1, 2]: the max lands in the last bin
    assert summary.percentiles[50] == 1.0


def test_constant_tensor_gets_numpys_unit_range() -> None:
    summary = summarize(torch.full((5,), 3.0), bins=4)
    counts, edges = np.histogram(np.full(5, 3.0), bins=4)
    assert summary.histogram.counts == counts.tolist()
    assert summary.histogram.edges == pytest.approx(edges.tolist())
    assert (summary.std, summary.percentiles[1], summary.percentiles[99]) == (0.0, 3.0, 3.0)


@pytest.mark.parametrize(
    ("shape", "channel_dim"), [((4, 3, 5, 5), 1), ((3, 6, 6), 0), ((2, 5, 4), -1), ((6, 2), 1), ((5,), 0)]
)
def test_per_channel_matches_a_loop_over_channels(shape: tuple[int, ...], channel_dim: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(shape).relu()  # about half exact zeros
    x.view(-1)[::7] = NAN
    x.view(-1)[3::11] = INF
    channels = summarize(x, per_channel=True, channel_dim=channel_dim).channels
    assert channels is not None and channels.dim == channel_dim % x.dim()
    for c in range(x.shape[channel_dim]):
        values = x.select(channel_dim, c).double().numpy().ravel()
        finite = values[np.isfinite(values)]
        got = tuple(getattr(channels, f)[c] for f in ("mean", "std", "min", "max", "mean_abs", "zero_fraction"))
        assert got[5] == pytest.approx((values == 0).mean())
        if not finite.size:
            assert all(math.isnan(v) for v in got[:5])
            continue
        expect = (finite.mean(), finite.std(), finite.min(), finite.max(), np.abs(finite).mean())
        assert got[:5] == pytest.approx(expect, rel=1e-12, abs=1e-12)


def test_per_channel_of_a_channel_with_no_finite_value() -> None:
    x = torch.tensor([[1.0, NAN], [3.0, NAN]])  # channel 1 is all NaN
    channels = summarize(x, per_channel=True).channels
    assert channels is not None and channels.mean[0] == 2.0
    assert all(math.isnan(getattr(channels, f)[1]) for f in ("mean", "std", "min", "max", "mean_abs"))
    assert channels.zero_fraction == [0.0, 0.0]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.uint8, torch.bool])
def test_integer_and_bool_tensors_are_summarized_in_float64(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randint(0, 2 if dtype == torch.bool else 100, (50, 4)).to(dtype)
    assert_matches_numpy(summarize(x, bins=7), x.numpy().astype(np.float64), bins=7)


@pytest.mark.parametrize("tensor", [torch.empty(0), torch.empty(0, 3), torch.full((2, 3), NAN)])
def test_empty_and_all_nan_give_nan_statistics(tensor: Tensor) -> None:
    summary = summarize(tensor)
    assert summary.count == tensor.numel() and summary.nan_count == tensor.isnan().sum()
    stats = (summary.mean, summary.std, summary.min, summary.max, summary.mean_abs, summary.l2)
    assert all(math.isnan(v) for v in (*stats, *summary.percentiles.values()))
    assert summary.histogram.counts == [] and summary.histogram.edges == []
    json.dumps(summary.as_dict(), allow_nan=False)  # NaN becomes None


def test_above_torch_quantile_size_limit() -> None:
    """torch.quantile refuses more than 2**24 elements; a shuffled arange has known percentiles."""
    n = 2**24 + 1  # 0 .. 2**24 are exact in float32
    x = torch.randperm(n, generator=torch.Generator().manual_seed(0)).to(torch.float32)
    summary = summarize(x, bins=4, percentiles=(0, 12.5, 50, 99.9, 100))
    assert summary.percentiles == {p: pytest.approx(p / 100 * (n - 1)) for p in (0, 12.5, 50, 99.9, 100)}
    assert summary.histogram.counts == [2**22, 2**22, 2**22, 2**22 + 1]
    assert summary.mean == (n - 1) / 2


def test_as_dict_is_json_ready() -> None:
    summary = summarize(torch.tensor([[0.0, 1.0], [NAN, 4.0]]), per_channel=True, bins=3, percentiles=(50, 99.5))
    plain = summary.as_dict()
    assert json.loads(json.dumps(plain, allow_nan=False)) == plain
    assert plain["percentiles"] == {"50": 1.0, "99.5": pytest.approx(3.97)}
    assert plain["channels"]["mean"] == [0.0, 2.5] and plain["channels"]["dim"] == 1
    assert plain["histogram"]["counts"] == [2, 0, 1] and plain["nan_count"] == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bins": 0}, "bins must be a positive int, got 0"),
        ({"percentiles": (50, 101)}, r"percentiles must lie in \[0, 100\], got \[101\]"),
        ({"per_channel": True, "channel_dim": 3}, r"channel_dim=3 is out of range for a tensor of shape \(2, 3\)"),
    ],
)
def test_summarize_rejects_bad_options(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(HookscopeError, match=match):
        summarize(torch.zeros(2, 3), **kwargs)  # type: ignore[arg-type]


def test_summarize_rejects_complex_and_non_tensors() -> None:
    with pytest.raises(HookscopeError, match="expects a real tensor, got a complex one"):
        summarize(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(HookscopeError, match=r"expects a torch\.Tensor, got list"):
        summarize([1.0, 2.0])  # type: ignore[arg-type]


# -- gradient flow ----------------------------------------------------------------------------
class HeadFirst(nn.Module):
    """Modules registered head first, called body first: forward order is not registration order."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 2)
        self.act = nn.Tanh()
        self.body = nn.Linear(3, 4)
        self.unused = nn.Linear(3, 1)  # never called

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.act(self.body(x)))


def flow_by_hand(tensors: list[Tensor]) -> tuple[float, float, int]:
    magnitudes = torch.cat([t.abs().flatten() for t in tensors])
    return magnitudes.mean().item(), magnitudes.max().item(), magnitudes.numel()


def test_gradient_flow_follows_forward_order_and_matches_autograd() -> None:
    torch.manual_seed(0)
    model = HeadFirst().double()
    x = torch.randn(5, 3, dtype=torch.float64)
    with (
        pytest.warns(hookscope.CaptureWarning) as warned,
        hookscope.capture(model, None, kinds=("grad_output", "param_grad")) as cap,
    ):
        model(x).pow(2).sum().backward()
    assert sorted(str(w.message).split(":")[1] for w in warned) == [
        " no param_grad for 'act'",
        " nothing captured for 'unused'",
    ]
    assert list(cap) == ["head", "act", "body", "unused"]
    assert [r.name for r in forward_order(cap)] == ["body", "act", "head", "unused"]
    body = model.body(x)
    act = torch.tanh(body)
    head = model.head(act)
    grads = dict(zip(["body", "act", "head"], torch.autograd.grad(head.pow(2).sum(), [body, act, head]), strict=True))
    rows = gradient_flow(cap)
    assert [r.name for r in rows] == ["body", "act", "head"]
    for row in rows:
        assert (row.mean_abs, row.max_abs, row.count) == pytest.approx(flow_by_hand([grads[row.name]]))
    params = gradient_flow(cap, kind="param_grad")
    assert [r.name for r in params] == ["body", "head"]  # Tanh has no parameters, unused got no gradient
    for row in params:
        layer = getattr(model, row.name)
        assert (row.mean_abs, row.max_abs, row.count) == pytest.approx(
            flow_by_hand([layer.weight.grad, layer.bias.grad])
        )


def test_gradient_flow_pools_every_call_and_takes_the_latest_param_grad() -> None:
    torch.manual_seed(0)
    model = SharedCell(width=4, steps=3).double()
    x = torch.randn(2, 4, dtype=torch.float64)
    with hookscope.capture(model, "cell", kinds=("grad_output", "param_grad")) as cap:
        model(x).sum().backward()
        model(x).pow(2).sum().backward()  # second pass: param.grad accumulates, grad_output adds up per call
    (row,) = gradient_flow(cap)
    per_call = [call.grad_output for call in cap["cell"].calls]
    assert len(per_call) == 6 and row.count == 6 * 2 * 4
    assert (row.mean_abs, row.max_abs) == pytest.approx(flow_by_hand(per_call)[:2])
    (param_row,) = gradient_flow(cap, kind="param_grad")
    latest = [model.cell.weight.grad, model.cell.bias.grad]  # accumulated over both passes
    assert (param_row.mean_abs, param_row.max_abs, param_row.count) == pytest.approx(flow_by_hand(latest))


def test_gradient_flow_needs_a_gradient_kind() -> None:
    model = nn.Linear(2, 2)
    with hookscope.capture(model, None) as cap:
        model(torch.zeros(1, 2))
    with pytest.raises(HookscopeError, match=r"needs a gradient kind \(grad_input, grad_output, param_grad\)"):
        gradient_flow(cap, kind="output")
    assert gradient_flow(cap) == []  # no gradient captured: no rows
