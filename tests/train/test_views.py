"""A History and a Watch show themselves in a notebook: a table with sparklines, escaped, nothing fetched."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import hookscope


class Odd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add_module("<b>in</b>", nn.Linear(4, 4))
        self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(getattr(self, "<b>in</b>")(x)))


def test_a_history_and_a_watch_show_as_html() -> None:
    torch.manual_seed(0)
    model = Odd()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookscope.watch(model, opt, every=1, thresholds={"exploding": 1e-9, "patience": 1}) as w:
        for _ in range(4):
            loss = F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 2))
            opt.zero_grad()
            loss.backward()
            opt.step()
    history = w.history("<b>in</b>")
    for html in (history._repr_html_(), w._repr_html_()):
        assert html is not None and html.startswith('<div class="hookscope-view">')
        assert "<b>in</b>" not in html and "&lt;b&gt;in&lt;/b&gt;" in html
        assert "data:image/png;base64," in html and "<script" not in html and "http" not in html
    assert "grad_norm" in (history._repr_html_() or "") and "exploding" in (w._repr_html_() or "")
