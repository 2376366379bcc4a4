"""Faults put into a training run on purpose, and the alert that names the module and the step."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def fit(model: nn.Module, opt: torch.optim.Optimizer, steps: int, *, poison: int | None = None, **options: Any) -> Any:
    """Steps of a regression on random data inside watch(every=1); the input holds a NaN at step ``poison``."""
    torch.manual_seed(0)
    with hookscope.watch(model, opt, every=1, **options) as w:
        for step in range(steps):
            x, y = torch.randn(32, 16), torch.randn(32, 2)
            if step == poison:
                x[3, 5] = float("nan")
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return w


def kinds(w: Any) -> list[tuple[str, str, int]]:
    return [(a.kind, a.module, a.step) for a in w.alerts]


def test_a_sigmoid_stack_whose_early_gradients_vanish() -> None:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(12):
        layers += [nn.Linear(16, 16), nn.Sigmoid()]
    model = nn.Sequential(*layers, nn.Linear(16, 2))
    w = fit(model, torch.optim.SGD(model.parameters(), lr=0.1), 5)
    vanishing = [(m, s) for k, m, s in kinds(w) if k == "vanishing"]
    assert ("0", 2) in vanishing  # the first Linear, after patience=3 logged steps (0, 1, 2)
    assert "24" not in {m for m, _ in vanishing}  # the last layer learns
    alert = next(a for a in w.alerts if a.kind == "vanishing" and a.module == "0")
    assert alert.value < alert.bound == 1e-7 and alert.column == "grad_norm"
    assert w.history("0")["grad_norm"][2] == alert.value


def test_a_relu_after_a_large_negative_bias_is_dead() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    with torch.no_grad():
        model[0].bias[:24] = -100.0  # 24 of the 32 units can never fire
    w = fit(model, torch.optim.SGD(model.parameters(), lr=0.01), 4)
    dead = [a for a in w.alerts if a.kind == "dead"]
    assert [(a.module, a.step) for a in dead] == [("1", 2)]  # once the window of 3 logged steps is full
    assert dead[0].value == pytest.approx(24 / 32)
    assert w.history("1")["dead"] == pytest.approx([0.75] * 4)
    assert w.history("0")["dead"] == [0.0] * 4  # its outputs are negative, not zero


def test_a_learning_rate_that_blows_up_the_update_ratio() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 2))
    opt = torch.optim.SGD([{"params": model[0].parameters(), "lr": 1e-2},
                           {"params": model[2].parameters(), "lr": 30.0}])  # fmt: skip
    w = fit(model, opt, 4)
    ratio = [(m, s) for k, m, s in kinds(w) if k == "update_ratio"]
    assert ratio[0] == ("2", 2)  # outside the band for patience=3 steps, first at the layer with the huge rate
    alert = next(a for a in w.alerts if a.kind == "update_ratio")
    assert alert.value > alert.bound == 0.1 and "above the band" in alert.message


def test_a_non_finite_value_is_named_at_its_step() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 2))
    w = fit(model, torch.optim.SGD(model.parameters(), lr=0.01), 4, poison=2)
    first = next(a for a in w.alerts if a.kind == "non_finite")
    assert (first.module, first.step) == ("0", 2)
    assert "act_mean" in first.message


def test_thresholds_are_the_users() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 2))
    w = fit(model, torch.optim.SGD(model.parameters(), lr=0.01), 3, thresholds={"exploding": 1e-9, "patience": 1})
    assert {(k, s) for k, m, s in kinds(w) if m == "2"} >= {("exploding", 0)}
    assert all(s == 0 for k, _, s in kinds(w) if k == "exploding")  # once, until the condition clears
