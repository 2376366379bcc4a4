"""``w.log`` in the usual loop: the step a scalar lands on, read back from the store; what
``hookscope info`` and the training report say of the scalars a store keeps."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope.cli import main

DATA = [(torch.randn(8, 4, generator=torch.Generator().manual_seed(k)), torch.tensor([0, 1] * 4)) for k in range(4)]


def _expected_losses() -> list[float]:
    """The oracle: each step's loss, from an unwatched copy of the loop."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = []
    for x, y in DATA:
        loss = F.cross_entropy(model(x), y)
        expected.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return expected


def _watched(out: Path) -> list[float]:
    """The usual loop under watch(every=2), the loss logged after opt.step(); the losses it saw."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    with hookscope.watch(model, opt, every=2, out=out) as w:
        for x, y in DATA:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()  # ends the step
            with torch.no_grad():
                model(x)  # an evaluation pass between two steps belongs to none
            w.log(loss=loss, lr=0.1)
            losses.append(loss.item())
    return losses


def test_a_loss_logged_after_the_optimizer_step_lands_on_its_own_step(tmp_path: Path) -> None:
    losses, expected = _watched(tmp_path / "run.hookscope"), _expected_losses()
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


def test_info_and_the_training_report_list_the_scalars(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _watched(tmp_path / "run.hookscope")
    last = _expected_losses()[-1]
    assert main(["info", str(tmp_path / "run.hookscope")]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("scalars   2 logged with w.log (run.scalars())")
    assert lines[start + 1 : start + 3] == [
        f"          loss  4 values, steps 0..3, last {last:.3g}",
        "          lr    4 values, steps 0..3, last 0.1",
    ]
    page = hookscope.build_training_report(hookscope.load(tmp_path / "run.hookscope"))
    assert [(r.name, r.values, r.first, r.last) for r in page.scalars] == [("loss", 4, 0, 3), ("lr", 4, 0, 3)]
    assert page.scalars[0].last_value == pytest.approx(last, rel=1e-6)
    html = hookscope.render_html(page)
    rows = html[html.index('id="scalars"') : html.index("</section>", html.index('id="scalars"'))]
    assert '<code>loss</code></td><td class="n">4</td><td class="n">0</td><td class="n">3</td>' in rows
    assert "<code>lr</code>" in rows
