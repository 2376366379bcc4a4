"""Every chart a report can hold writes its text in one of two sizes, both legible: ``viz.fonts.FONT``
points for labels, ticks, legends and numbers in cells, ``TITLE`` for titles, at least ``MIN_PX`` (9)
pixels at the chart's own size. Oracle: the sizes of the matplotlib text artists of each figure as it
is drawn (caught at ``FigureCanvasAgg.draw``), whatever route the chart took to the canvas."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.viz import charts, curves, fonts

matplotlib_agg = pytest.importorskip("matplotlib.backends.backend_agg")
text_class = pytest.importorskip("matplotlib.text").Text


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures drawn while the test runs."""
    figures: list[Any] = []
    draw = matplotlib_agg.FigureCanvasAgg.draw

    def recording(canvas: Any, *args: Any, **kwargs: Any) -> Any:
        figures.append(canvas.figure)
        return draw(canvas, *args, **kwargs)

    monkeypatch.setattr(matplotlib_agg.FigureCanvasAgg, "draw", recording)
    return figures


def sizes(fig: Any) -> dict[str, float]:
    """Each visible text of ``fig`` (ticks included) and its size in pixels."""
    return {
        f"{t.get_text()!r} ({i})": fonts.pixels(t.get_fontsize(), fig.dpi)
        for i, t in enumerate(fig.findobj(text_class))
        if t.get_visible() and t.get_text().strip()
    }


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    ).eval()


def charts_of_a_report() -> dict[str, Any]:
    """One of each chart, from tiny inputs: the report's, the training page's and the rooms' sections."""
    model, x = net(), torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with hookscope.capture(model, ["0", "2", "6"], kinds=("output", "grad_output")) as cap:
        model(x).sum().backward()
    heat = hookscope.cam(model, x[:1], "gradcam", select="2")
    made: dict[str, Any] = {
        "histograms": lambda: charts.histogram_plot(cap),
        "gradient flow": lambda: charts.gradient_flow_plot(cap),
        "counts": lambda: charts.counts_plot([1, 5, 2], [0.0, 1.0, 2.0, 3.0], title="one layer", log=True),
        "curves": lambda: curves.curves_png({"0": ([0, 1, 2], [1e-3, 2e-3, 0.0])}, title="grad norm", log=True),
        "heatmap": lambda: curves.heatmap_png(
            ["0", "2"], [0, 1, 2], [[1e-3, 0.0, 2e-2], [1.0, 3.0, 1e-5]], title="update ratio"
        ),
        "similarity": lambda: hookscope.compare.cka(model, None, [x], select=["0", "2"]).plot(),
        "divergence": lambda: hookscope.compare.divergence(model, net(), x, select=["0", "2"]).plot(),
        "faithfulness": lambda: hookscope.faithfulness(model, x[:1], {"gradcam": heat}, metrics=("deletion",)).plot(),
        "probes": lambda: hookscope.probe(
            cap, torch.tensor([0, 1, 0, 1]), select=["2", "6"], method="mean_difference"
        ).plot(),
        "patching": lambda: hookscope.patch_sweep(
            model, x[:1], x[1:2], select=["0", "2"], target=lambda out: out[:, 0]
        ).plot(),
    }
    return made


@pytest.mark.parametrize("chart", list(charts_of_a_report()))
def test_every_chart_writes_legible_text_in_one_of_two_sizes(drawn: list[Any], chart: str) -> None:
    charts_of_a_report()[chart]()
    assert drawn, f"{chart} drew no matplotlib figure"
    for fig in drawn:
        found = sizes(fig)
        assert found, f"{chart} has no text"
        small = {text: px for text, px in found.items() if px < fonts.MIN_PX}
        assert not small, f"{chart}: text under {fonts.MIN_PX} px: {small}"
        assert set(found.values()) <= {fonts.pixels(fonts.FONT), fonts.pixels(fonts.TITLE)}, (chart, found)


def test_the_logit_lens_grid_too(drawn: list[Any]) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=16, vocab_size=20)
    model = transformers.GPT2LMHeadModel(config).eval()
    hookscope.logit_lens(model, torch.tensor([[1, 2, 3]]), top_k=1).plot()
    assert drawn and all(min(sizes(fig).values()) >= fonts.MIN_PX for fig in drawn)
    assert {px for fig in drawn for px in sizes(fig).values()} <= {fonts.pixels(fonts.FONT), fonts.pixels(fonts.TITLE)}


def test_nine_points_at_the_charts_dpi_is_over_nine_pixels() -> None:
    assert fonts.pixels(fonts.FONT) == pytest.approx(12.5) and fonts.pixels(fonts.TITLE) == pytest.approx(
        13.89, abs=0.01
    )
    assert charts.DPI == curves.DPI == fonts.DPI  # one source
