"""What every callback does (integrations.session): no hook left when a forward pass raises, nor at close."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope
from hookscope.integrations.session import Options, Session


class Breaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 100:
            raise ValueError("a broken batch")
        out: torch.Tensor = self.fc(x)
        return out


def test_a_forward_that_raises_closes_the_session(tmp_path: Path) -> None:
    model = Breaks()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    session = Session(Options(every=1, out=tmp_path / "run.hookscope", nan_guard=True))
    w = session.open(model, opt)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    with pytest.raises(ValueError, match="a broken batch"):
        model(torch.full((1, 2), 1000.0))
    assert session.closed and hookscope.find_hooks(model, optimizer=opt) == []
    assert w.steps == 1 and hookscope.load(tmp_path / "run.hookscope").config["ended"] == "by ValueError"


def test_close_removes_every_hook_and_twice_is_a_no_op() -> None:
    model = Breaks()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    session = Session(Options(every=1))
    session.open(model, opt)
    assert hookscope.find_hooks(model, optimizer=opt) != []
    session.close()
    session.close()
    assert hookscope.find_hooks(model, optimizer=opt) == []
