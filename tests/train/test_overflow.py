"""Norms that do not overflow: weights near 1e26 are finite, and so is every statistic watch logs of them."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope.cli import main
from hookscope.stats.norms import square_sum
from hookscope.train.measures import activation_moments, activation_row
from hookscope.viz.curves import curves_png, log_scale, sparkline_png
from hookscope.zoo.lenet import digits


def test_square_sums_and_moments_of_huge_finite_values_are_finite_and_exact() -> None:
    for n in (100, 4096, 8192 + 7):  # a tail only, full rows only, both
        t = torch.full((n,), 1e22)
        t[3] = -3e22
        exact = t.double().square().sum().item()  # float64 holds these squares (1e44) without overflow
        assert math.isclose(square_sum(t).item(), exact, rel_tol=1e-6)
        moments, _ = activation_moments(t.view(n, 1), 1)
        mean, std, abs_mean, _ = activation_row(moments.tolist())
        assert math.isclose(mean, t.double().mean().item(), rel_tol=1e-6)
        assert math.isclose(std, t.double().std().item(), rel_tol=1e-5)
        assert math.isclose(abs_mean, t.double().abs().mean().item(), rel_tol=1e-6)
    assert math.isnan(square_sum(torch.tensor([1.0, math.nan])).item())  # non-finite: the tensor held one
    assert square_sum(torch.tensor([1.0, math.inf])).item() == math.inf
    assert square_sum(torch.zeros(10)).item() == 0.0


def test_lr_50_gives_huge_finite_weights_and_no_non_finite_alert(tmp_path: Path) -> None:
    """The digits MLP at lr=50: its weights reach 1e26 and stay finite; nothing is reported non-finite."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x, y = digits("train")
        x = x.flatten(1)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(1024, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        opt = torch.optim.SGD(model.parameters(), lr=50)
        with hookscope.watch(model, opt, every=2, out=tmp_path / "run.hookscope") as w:
            for step in range(30):
                rows = torch.arange(step * 32, (step + 1) * 32) % len(y)
                loss = F.cross_entropy(model(x[rows]), y[rows])
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        torch.set_num_threads(threads)
    largest = max(p.detach().abs().max().item() for p in model.parameters())
    assert 1e22 < largest < math.inf  # huge, and finite
    assert [a for a in w.alerts if a.kind == "non_finite"] == []
    last = w.history("2").last()
    weight = torch.cat([p.detach().double().flatten() for p in model[2].parameters()]).norm().item()
    assert math.isclose(last["weight_norm"], weight, rel_tol=1e-6)
    assert main(["report", "--from", str(tmp_path / "run.hookscope"), "--out", str(tmp_path / "page")]) == 0
    assert "First non-finite value" not in (tmp_path / "page" / "index.html").read_text()


def test_a_zero_gradient_is_drawn_at_zero_on_a_log_chart() -> None:
    assert log_scale([0.0, 1e-3, 0.1, math.nan]) == ("symlog", {"linthresh": 1e-3})  # zero kept, at zero
    assert log_scale([1e-3, 0.1]) == ("log", {}) and log_scale([0.0, math.nan]) is None
    series = {"fc1": ([0, 1, 2], [0.5, 0.0, 0.25]), "fc2": ([0, 1, 2], [1e-4, 1e-3, 0.0])}
    assert curves_png(series, title="grad_norm (log)", log=True).startswith(b"\x89PNG")  # no warning either
    assert sparkline_png([0.5, 0.0, 0.25], log=True).startswith(b"\x89PNG")
