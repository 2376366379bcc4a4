"""An alert means a fault: the update ratio of a zero-initialised layer (PEFT's lora_B, an output head) is
undefined at its first step, marked so in the rows, tables, store, page and sinks, and raises no alert;
an update that does hold NaN or inf still does."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope.cli import main

STEPS = 3


class _Recorder:
    """A sink object that keeps what it is sent."""

    def __init__(self) -> None:
        self.values: dict[int, dict[str, float]] = {}
        self.alerts: list[Any] = []

    def scalars(self, step: int, values: Any) -> None:
        self.values.setdefault(step, {}).update(values)

    def alert(self, alert: Any) -> None:
        self.alerts.append(alert)

    def close(self) -> None:
        pass


def _zero_head() -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3, bias=False))
    with torch.no_grad():
        model[2].weight.zero_()
    return model


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(STEPS)]


def _train(model: nn.Module, *, steps: int = STEPS, lr: float = 0.1, **options: Any) -> hookscope.Watch:
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    with hookscope.watch(model, opt, every=1, **options) as w:
        for x, y in _batches()[:steps]:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return w


def _hand_ratios(model: nn.Module) -> list[float]:
    """|w_after - w_before| / |w_before| of the head at each step, from a hand loop."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ratios = []
    for x, y in _batches():
        before = model[2].weight.detach().clone()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        delta = (model[2].weight.detach() - before).double().norm()
        ratios.append((delta / before.double().norm()).item() if before.norm() > 0 else math.nan)
    return ratios


def test_a_zero_initialised_head_is_undefined_at_step_0_not_an_alert() -> None:
    model = _zero_head()
    hand = _hand_ratios(copy.deepcopy(model))
    sink = _Recorder()
    w = _train(model, sinks=[sink])
    assert w.alerts == [] and sink.alerts == []
    head = w.history("2")
    assert head.undefined == {"update_ratio": [0]}
    assert math.isnan(head["update_ratio"][0]) and math.isnan(hand[0])
    assert head["update_ratio"][1:] == pytest.approx(hand[1:], rel=1e-6)
    assert head.table().splitlines()[1].split()[:3] == ["0", f"{head['grad_norm'][0]:.4g}", "undefined"]
    assert "2/update_ratio" not in sink.values[0]  # sinks get finite values only: undefined is a gap
    assert sink.values[1]["2/update_ratio"] == pytest.approx(hand[1], rel=1e-6)
    assert w.history("0").undefined == {}


def test_undefined_is_kept_by_the_store_and_shown_by_info_and_the_page(tmp_path: Path, capsys: Any) -> None:
    _train(_zero_head(), steps=1, out=tmp_path / "run.hookscope")
    run = hookscope.load(tmp_path / "run.hookscope")
    assert run.alerts == [] and run.history("2").undefined == {"update_ratio": [0]}
    assert main(["info", str(tmp_path / "run.hookscope")]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[4] == "undefined"
    page = hookscope.build_training_report(run)
    assert page.first_non_finite is None and page.table().splitlines()[-1].split()[4] == "undefined"
    assert main(["report", "--from", str(tmp_path / "run.hookscope"), "--out", str(tmp_path / "page")]) == 0
    html = (tmp_path / "page" / "index.html").read_text()
    assert "suspect" not in html and "First non-finite" not in html and ">undefined</td>" in html


def test_an_update_that_overflows_zero_weights_is_still_an_alert() -> None:
    """lr = inf on the zero head: its update holds inf and NaN, a fault, whatever the weights' norm."""
    w = _train(_zero_head(), steps=1, lr=math.inf)
    (alert,) = [a for a in w.alerts if a.module == "2"]
    assert alert.kind == "non_finite" and alert.message == "weight_norm, update_ratio not finite"
    assert w.history("2").undefined == {}
