"""``w.log`` in the usual loop: the step a scalar lands on, read back from the store."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope


def test_a_loss_logged_after_the_optimizer_step_lands_on_its_own_step(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(4)]
    losses = []
    with hookscope.watch(model, opt, every=2, out=tmp_path / "run.hookscope") as w:
        for x, y in data:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()  # ends the step
            with torch.no_grad():
                model(x)  # an evaluation pass between two steps belongs to none
            w.log(loss=loss)
            losses.append(loss.item())
    # the oracle: each step's loss recomputed from the weights it started with
    torch.manual_seed(0)
    again = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt2 = torch.optim.SGD(again.parameters(), lr=0.1)
    expected = []
    for x, y in data:
        loss = F.cross_entropy(again(x), y)
        expected.append(loss.item())
        opt2.zero_grad()
        loss.backward()
        opt2.step()
    assert expected == pytest.approx(losses, rel=1e-6)
    run = hookscope.load(tmp_path / "run.hookscope")
    assert run.scalars()["loss"] == [(k, pytest.approx(v, rel=1e-6)) for k, v in enumerate(expected)]
    assert run.history("0").steps == [0, 2]  # the statistics' steps, the same numbering


def test_a_scalar_logged_before_any_forward_pass_lands_on_the_current_step(tmp_path: Path) -> None:
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookscope.watch(model, opt, every=1, out=tmp_path / "run.hookscope") as w:
        w.log(lr=0.1)  # before the first forward: step 0
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        w.log(after=1.0)  # after step 0's optimizer step: still step 0
        model(torch.ones(1, 2)).sum().backward()
        w.log(during=2.0)  # step 1's forward ran: step 1
        w.log(explicit=3.0, step=7)
    scalars = hookscope.load(tmp_path / "run.hookscope").scalars()
    assert {k: v[0][0] for k, v in scalars.items()} == {"lr": 0, "after": 0, "during": 1, "explicit": 7}
