"""A History's and a Watch's .table() and .plot(): the logged rows as text, the training chart as a PIL image."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope
from hookscope.viz.curves import curves_png


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> tuple[hookscope.Watch, Path]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tmp_path_factory.mktemp("watch") / "w.hookscope"
    with hookscope.watch(model, opt, every=2, out=out) as w:
        for _ in range(6):
            opt.zero_grad()
            model(torch.randn(5, 4)).pow(2).sum().backward()
            opt.step()
    return w, out


def cells(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]


def number(cell: str) -> float:
    return float("nan") if cell == "–" else float(cell)


def test_history_table_is_a_row_per_logged_step(watched: tuple[hookscope.Watch, Path]) -> None:
    history = watched[0].history("0")
    header, *rows = cells(history.table(columns=["grad_norm", "dead", "weight_norm"]))
    assert header == ["step", "grad_norm", "dead", "weight_norm"]
    assert [int(r[0]) for r in rows] == history.steps == [0, 2, 4]
    for column, i in (("grad_norm", 1), ("dead", 2), ("weight_norm", 3)):
        assert [number(r[i]) for r in rows] == pytest.approx(history[column], rel=1e-3)
    default = cells(history.table())[0]
    assert "grad_norm" in default and "weight_norm" in default
    relu = cells(watched[0].history("1").table())[0]
    assert "grad_norm" not in relu and "weight_norm" not in relu  # a ReLU has no parameters: never measured
    with pytest.raises(hookscope.OptionError, match="got bogus"):
        history.table(columns=["bogus"])


def test_watch_table_is_each_module_s_last_row(watched: tuple[hookscope.Watch, Path]) -> None:
    w, out = watched
    header, *rows = cells(w.table())
    assert header == ["module", "type", "logged", "step", "grad_norm", "update_ratio", "dead", "act_std"]
    assert [r[:4] for r in rows] == [["0", "Linear", "3", "4"], ["1", "ReLU", "3", "4"], ["2", "Linear", "3", "4"]]
    for row, history in zip(rows, w.histories().values(), strict=True):
        last = history.last()
        assert [number(c) for c in row[4:]] == pytest.approx(
            [last[c] for c in ("grad_norm", "update_ratio", "dead", "act_std")], rel=1e-3, nan_ok=True
        )
    assert hookscope.load(out).history("2").table() == w.history("2").table()  # the store reads the same rows


def test_plots_are_the_training_report_s_chart(watched: tuple[hookscope.Watch, Path]) -> None:
    pil = pytest.importorskip("PIL.Image")
    w = watched[0]
    image = w.plot()
    series = {name: (h.steps, h["grad_norm"]) for name, h in w.histories().items()}
    expected = pil.open(io.BytesIO(curves_png(series, title="grad_norm (log)", log=True))).convert("RGB")
    assert image.size == expected.size and image.tobytes() == expected.tobytes()
    assert 300 < image.width < 1500 and 150 < image.height < 800
    one = w.history("0").plot(column="act_std")
    assert one.mode == "RGB" and one.size == image.size and w.history("0")._repr_html_().startswith("<div")
    with pytest.raises(hookscope.OptionError, match="got 'step'"):
        w.plot(column="step")
    assert isinstance(w._repr_html_(), str)
