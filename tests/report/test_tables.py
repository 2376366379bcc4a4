"""One result shape: .table() (text, a row per thing) and .plot() (a PIL image) of the results the inline views draw.

Every number is checked against the object's own fields or a computation here (numpy's statistics,
torch's mean and std), every picture against its size and the function that draws it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import hookscope
from hookscope import edits
from hookscope.base.display import plot_of
from hookscope.report.html import format_number
from tests.base.test_display import has_view


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.relu = nn.ReLU()
        self.head = nn.Linear(4 * 6 * 6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.relu(self.conv(x)).flatten(1))


@pytest.fixture(scope="module")
def model() -> Net:
    torch.manual_seed(0)
    return Net().eval()


@pytest.fixture(scope="module")
def cap(model: Net) -> hookscope.Capture:
    torch.manual_seed(1)
    no_grad = pytest.warns(hookscope.CaptureWarning, match="no grad_output")  # the second call has none
    with no_grad, hookscope.capture(model, kinds=("output", "grad_output")) as cap:
        model(torch.randn(2, 3, 8, 8)).sum().backward()
        with torch.no_grad():
            model(torch.randn(2, 3, 8, 8))
    return cap


def cells(text: str) -> list[list[str]]:
    """The rows of a text table, split on runs of two or more spaces."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]


def test_capture_table_is_a_row_per_site(cap: hookscope.Capture) -> None:
    header, *rows = cells(cap.table())
    assert header == ["#", "site", "type", "calls", "kinds", "shapes (call 0)", "size"]
    assert [(r[1], r[2], int(r[3])) for r in rows] == [
        ("conv", "Conv2d", 2),
        ("relu", "ReLU", 2),
        ("head", "Linear", 2),
    ]
    assert rows[0][4] == "output, grad_output" and rows[0][5] == "output (2, 4, 6, 6); grad_output (2, 4, 6, 6)"
    held = sum(
        t.numel() * t.element_size() for c in cap["head"].calls for ts in c.tensors.values() for t in ts.values()
    )
    assert held == 3 * 2 * 2 * 4 and rows[2][6] == "48 B"  # two outputs and one gradient of (2, 2) float32


def test_record_table_is_a_row_per_call_with_torch_s_mean_and_std(cap: hookscope.Capture) -> None:
    header, *rows, footer = cells(cap["conv"].table())
    assert header == ["call", "output", "grad_output", "mean", "std"]
    assert [r[:3] for r in rows] == [["0", "(2, 4, 6, 6)", "(2, 4, 6, 6)"], ["1", "(2, 4, 6, 6)", "–"]]
    for row, call in zip(rows, cap["conv"].calls, strict=True):
        out = call.output.double()
        assert float(row[3]) == pytest.approx(float(out.mean()), rel=1e-3)
        assert float(row[4]) == pytest.approx(float(out.std(correction=0)), rel=1e-3)
    assert footer == ["conv (Conv2d): 2 call(s); mean and std of output"]


def test_a_site_s_numbers_are_its_output_s_whatever_else_it_holds(model: Net) -> None:
    with hookscope.capture(model, "relu", kinds=("input", "output")) as cap:
        model(torch.randn(1, 3, 8, 8))
    header, row, footer = cells(cap["relu"].table())
    assert header == ["call", "input", "output", "mean", "std"] and footer[0].endswith("mean and std of output")
    assert float(row[3]) == pytest.approx(float(cap["relu"].output.double().mean()), rel=1e-3)
    assert cap["relu"].plot().tobytes() == hookscope.feature_grid(cap["relu"].output[0], channels=16).tobytes()


def test_record_and_call_plot_draw_image_0_s_feature_grid(cap: hookscope.Capture) -> None:
    call = cap["conv"].calls[1]
    image = cap["conv"].plot(call=1)
    expected = hookscope.feature_grid(call.output[0], channels=16)
    assert image.size == expected.size and image.tobytes() == expected.tobytes()
    grad = cap["conv"].calls[0].plot(kind="grad_output")
    assert grad.tobytes() == hookscope.feature_grid(cap["conv"].calls[0].grad_output[0], diverging=True).tobytes()
    assert 40 < image.width < 1000 and 40 < image.height < 1000
    with pytest.raises(hookscope.OptionError, match=r"has 2 call\(s\), got call=2; pass call= from 0 to 1"):
        cap["conv"].plot(call=2)
    with pytest.raises(hookscope.OptionError, match="holds output, got kind='grad_output'"):
        call.plot(kind="grad_output")


@pytest.mark.parametrize("maker", ["summary", "running"])
def test_statistics_table_and_histogram(maker: str) -> None:
    torch.manual_seed(2)
    x = torch.randn(1000, dtype=torch.float64)
    x[:100] = 0.0
    stats: Any = hookscope.summarize(x) if maker == "summary" else hookscope.RunningStats().update(x)
    table = dict(cells(stats.table())[1:])
    values = x.numpy()
    assert table["count"] == "1,000" and table["zero_fraction"] == format_number(0.1)
    assert float(table["mean"]) == pytest.approx(values.mean(), rel=1e-3)
    assert float(table["std"]) == pytest.approx(values.std(), rel=1e-3)
    assert float(table["max"]) == pytest.approx(values.max(), rel=1e-3)
    if maker == "summary":
        assert float(table["p50"]) == pytest.approx(np.percentile(values, 50), rel=1e-3, abs=1e-4)
        assert float(table["p99"]) == pytest.approx(np.percentile(values, 99), rel=1e-3)
    else:
        assert not any(name.startswith("p") for name in table if name != "statistic")  # no percentiles kept
    image, logged = stats.plot(), stats.plot(log=True)
    assert image.mode == "RGB" and 150 < image.width < 600 and 100 < image.height < 500
    assert image.size == logged.size and image.tobytes() != logged.tobytes()


def test_store_table_is_what_describe_gives(cap: hookscope.Capture, tmp_path: Path) -> None:
    run = hookscope.save(cap, tmp_path / "cap.hookscope")
    assert run.table() == run.describe()
    assert [line.split()[0] for line in run.table().splitlines()[-6:]] == [
        "conv",
        "conv",
        "relu",
        "relu",
        "head",
        "head",
    ]
    with pytest.raises(hookscope.OptionError, match=r"a Node has no \.plot\(\)"):  # nothing registered for it
        plot_of(hookscope.module_graph(nn.Linear(2, 2), torch.zeros(1, 2)).nodes[0])


def test_report_table_is_a_row_per_layer_with_its_statistics(model: Net) -> None:
    report = hookscope.build_report(model, torch.randn(1, 3, 8, 8), cam_methods=())
    header, *rows = cells(report.table())
    assert header == ["#", "layer", "type", "calls", "shape", "output mean", "output std"]
    assert [r[1] for r in rows] == [layer.name for layer in report.layers] == ["conv", "relu", "head"]
    for row, layer in zip(rows, report.layers, strict=True):
        view = layer.output
        assert view is not None and row[4] == "(" + ", ".join(map(str, view.shape)) + ")"
        assert row[5:] == [format_number(view.stats["mean"]), format_number(view.stats["std"])]


def test_edit_report_table_is_its_text(model: Net) -> None:
    with hookscope.edit(model, {"relu": edits.zero(channels=[1])}) as e:
        model(torch.randn(1, 3, 8, 8))
    report = e.report()
    assert report.table() == str(report)
    header, row = cells(report.table())
    assert header[:3] == ["site", "edit", "kind"] and row[0] == "relu"
    assert row[5] == f"{report[0].changed:,}/{report[0].elements:,}" and report[0].elements == 4 * 6 * 6


def test_every_result_s_view_is_a_string(cap: hookscope.Capture, tmp_path: Path) -> None:
    run = hookscope.save(cap, tmp_path / "cap.hookscope")
    shown = [
        cap,
        cap["conv"],
        cap["conv"].calls[0],
        hookscope.summarize(torch.ones(3)),
        run,
        hookscope.gradient_flow(cap),
    ]
    assert all(isinstance(obj._repr_html_(), str) for obj in shown)


@pytest.mark.parametrize(
    ("name", "methods"),
    [("Capture", {"table", "plot"}), ("Record", {"table", "plot"}), ("Call", {"plot"}),
     ("Summary", {"table", "plot"}), ("RunningStats", {"table", "plot"}), ("Run", {"table", "plot"}),
     ("Report", {"table", "plot"}), ("History", {"table", "plot"}),
     ("Watch", {"table", "plot"}), ("GradientFlow", {"table", "plot"}), ("PatchSweep", {"table", "plot"}),
     ("Probes", {"table", "plot"}), ("TopExamples", {"table", "plot"})],
)  # fmt: skip
def test_the_public_results_have_one_shape(name: str, methods: set[str]) -> None:
    cls = getattr(hookscope, name)
    assert {m for m in ("table", "plot") if callable(getattr(cls, m, None))} == methods
    assert has_view(cls)


# -- .plot() of a capture, a store and a report ---------------------------------------------------------
def _small() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
    return net.eval(), torch.rand(2, 3, 8, 8)


def _pixels(image: Any) -> np.ndarray:
    return np.asarray(image.convert("RGB"))


def test_a_capture_and_a_store_plot_the_gradient_flow_or_histograms(tmp_path: Path) -> None:
    from hookscope.viz.charts import gradient_flow_plot, histogram_plot

    net, x = _small()
    with hookscope.capture(net, ["0", "4"], kinds=("output", "grad_output")) as cap:
        net(x).sum().backward()
    np.testing.assert_array_equal(_pixels(cap.plot()), _pixels(gradient_flow_plot(cap)))  # grads held: their flow
    np.testing.assert_array_equal(_pixels(cap.plot(kind="output")), _pixels(histogram_plot(cap, kind="output")))
    run = hookscope.extract(net, [x], out=tmp_path / "s", select=["0", "4"], progress=False)
    np.testing.assert_array_equal(_pixels(run.plot()), _pixels(histogram_plot(run, kind="output")))


def test_a_report_plots_its_first_picture() -> None:
    import io

    from PIL import Image

    net, x = _small()
    report = hookscope.build_report(net, x, cam_methods=())
    expected = Image.open(io.BytesIO(report.pictures[0])).convert("RGB")
    np.testing.assert_array_equal(_pixels(report.plot()), np.asarray(expected))
