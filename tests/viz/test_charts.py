"""plots: images of the right size, figures that hold what they claim, no global matplotlib state."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from matplotlib.colors import to_rgba
from PIL import Image
from torch import nn

import hookscope
from hookscope.errors import HookscopeError
from hookscope.stats.gradient_flow import FlowRow, gradient_flow
from hookscope.viz.charts import (
    EXPLODING,
    NORMAL,
    VANISHING,
    _flow_figure,
    _histogram_figure,
    _panels,
    gradient_flow_plot,
    histogram_plot,
)
from tests.models import LeNet, SharedCell


@pytest.fixture(scope="module")
def lenet_capture() -> hookscope.Capture:
    torch.manual_seed(0)
    model = LeNet()
    with hookscope.capture(model, [nn.Conv2d, nn.Linear], kinds=("output", "grad_output", "param_grad")) as cap:
        model(torch.randn(2, 3, 32, 32)).logsumexp(1).sum().backward()
    return cap


def run_python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


# -- histograms -------------------------------------------------------------------------------
def test_histogram_plot_of_tensors_is_a_grid_of_panels() -> None:
    torch.manual_seed(0)
    tensors = {"a": torch.randn(100), "b": torch.rand(3, 4), "c": torch.randint(0, 5, (20,))}
    image = histogram_plot(tensors, columns=2, bins=10)
    assert isinstance(image, Image.Image) and image.mode == "RGB"
    assert image.size == (2 * 260, 2 * 200)  # 2.6 x 2.0 inches a panel at 100 dpi
    assert histogram_plot(tensors).size == (2 * 260, 2 * 200)  # default: about square
    assert histogram_plot(tensors, columns=3).size == (3 * 260, 200)


def test_histogram_panels_follow_forward_order_with_stats_in_titles(lenet_capture: hookscope.Capture) -> None:
    fig = _histogram_figure(_panels(lenet_capture, "output"), bins=20, log=True, columns=None)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title().split("\n")[0] for ax in visible] == ["conv1", "conv2", "fc1", "fc2", "fc3"]
    out = lenet_capture["fc1"].output
    assert visible[2].get_title().split("\n")[1] == f"mean {out.mean():.3g}  std {out.std(correction=0):.3g}"
    assert all(ax.get_yscale() == "log" for ax in visible)
    assert len(fig.axes) == 6 and not fig.axes[5].get_visible()  # 3 x 2 grid, one left empty


def test_histogram_panels_of_gradients_and_parameters(lenet_capture: hookscope.Capture) -> None:
    grads = _panels(lenet_capture, "grad_output")
    assert list(grads) == ["conv1", "conv2", "fc1", "fc2", "fc3"]
    assert torch.equal(grads["fc2"], lenet_capture["fc2"].grad_output.flatten())
    params = _panels(lenet_capture, "param_grad")
    assert list(params)[:3] == ["conv1.weight", "conv1.bias", "conv2.weight"] and len(params) == 10
    assert histogram_plot(lenet_capture, kind="param_grad").size == (4 * 260, 3 * 200)


def test_histogram_of_a_capture_pools_every_call() -> None:
    model = SharedCell(width=4, steps=3)
    with hookscope.capture(model, "cell") as cap:
        model(torch.randn(2, 4))
    (pooled,) = _panels(cap, "output").values()
    assert torch.equal(pooled, torch.cat([call.output.flatten() for call in cap["cell"].calls]))


def test_histogram_panel_with_nan_or_nothing_finite() -> None:
    fig = _histogram_figure(
        {"some nan": torch.tensor([1.0, float("nan"), 2.0]), "empty": torch.empty(0)}, bins=5, log=False, columns=None
    )
    assert fig.axes[0].get_title().endswith("(1 NaN)")
    assert [t.get_text() for t in fig.axes[1].texts] == ["no finite values"]


def test_histogram_plot_errors(lenet_capture: hookscope.Capture) -> None:
    with pytest.raises(HookscopeError, match=r"no site holds grad_input; pass kinds=\(\.\.\., 'grad_input'\)"):
        histogram_plot(lenet_capture, kind="grad_input")
    with pytest.raises(HookscopeError, match=r"expects a capture or a \{name: tensor\} mapping; 'a' is a list"):
        histogram_plot({"a": [1.0], "b": torch.zeros(1)})  # type: ignore[dict-item]
    with pytest.raises(HookscopeError, match="columns must be a positive int or None, got 0"):
        histogram_plot({"a": torch.zeros(2)}, columns=0)


# -- gradient flow ----------------------------------------------------------------------------
def test_flow_figure_draws_thresholds_on_a_log_scale() -> None:
    rows = [FlowRow("ok", 1e-3, 1e-2, 4), FlowRow("tiny", 1e-9, 1e-8, 4), FlowRow("huge", 1e2, 1e5, 4)]
    ax = _flow_figure(rows, vanish=1e-6, explode=1e3, kind="grad_output").axes[0]
    assert ax.get_yscale() == "log"
    assert sorted(tuple(line.get_ydata()) for line in ax.get_lines()) == [(1e-6, 1e-6), (1e3, 1e3)]
    low, high = ax.get_ylim()
    assert low <= 1e-9 and high >= 1e5
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ok", "tiny", "huge"]
    max_bars, mean_bars = ax.patches[:3], ax.patches[3:]
    assert [bar.get_facecolor()[:3] for bar in mean_bars] == [to_rgba(c)[:3] for c in (NORMAL, VANISHING, NORMAL)]
    assert [bar.get_facecolor()[:3] for bar in max_bars] == [to_rgba(c)[:3] for c in (NORMAL, VANISHING, EXPLODING)]
    assert [bar.get_y() + bar.get_height() for bar in mean_bars] == pytest.approx([1e-3, 1e-9, 1e2])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["max |grad|", "mean |grad|", "vanishing: below 1e-06", "exploding: above 1e+03"]


def test_flow_figure_marks_zero_gradients_on_the_floor() -> None:
    rows = [FlowRow("dead", 0.0, 0.0, 4), FlowRow("ok", 1.0, 2.0, 4)]
    ax = _flow_figure(rows, vanish=1e-6, explode=1e3, kind="grad_output").axes[0]
    max_zeros, mean_zeros = ax.collections
    assert mean_zeros.get_offsets().tolist() == [[0.0, pytest.approx(ax.get_ylim()[0] * 1.5)]]
    assert max_zeros.get_offsets().tolist() == mean_zeros.get_offsets().tolist()


def test_gradient_flow_plot_grows_with_the_layer_count() -> None:
    few = gradient_flow_plot([FlowRow(f"layer{i:02d}.conv", 1e-3, 1e-2, 1) for i in range(5)])
    many = gradient_flow_plot([FlowRow(f"layer{i:02d}.conv", 1e-3, 1e-2, 1) for i in range(60)])
    assert few.size[0] == 600 and many.size[0] == round((0.26 * 60 + 1.6) * 100)
    assert few.size[1] == many.size[1] == round((3.6 + 0.08 * len("layer59.conv")) * 100)


def test_gradient_flow_plot_from_a_capture(lenet_capture: hookscope.Capture) -> None:
    image = gradient_flow_plot(lenet_capture, kind="param_grad")
    assert image.size == (600, round((3.6 + 0.08 * 5) * 100))
    assert gradient_flow_plot(gradient_flow(lenet_capture)).size == gradient_flow_plot(lenet_capture).size


def test_gradient_flow_plot_errors(lenet_capture: hookscope.Capture) -> None:
    with pytest.raises(HookscopeError, match=r"0 < vanish < explode, got vanish=1\.0, explode=0\.1"):
        gradient_flow_plot(lenet_capture, vanish=1.0, explode=0.1)
    with pytest.raises(HookscopeError, match="nothing to plot: no site holds grad_input"):
        gradient_flow_plot(lenet_capture, kind="grad_input")
    with pytest.raises(HookscopeError, match="needs a gradient kind"):
        gradient_flow_plot(lenet_capture, kind="output")


# -- no global state ----------------------------------------------------------------------------
def test_importing_stats_and_plots_loads_no_matplotlib_or_pillow() -> None:
    code = (
        "import sys, hookscope.viz.charts, hookscope.stats.summary, hookscope.stats.gradient_flow; "
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    loaded = run_python(code)
    assert "matplotlib" not in loaded and "PIL" not in loaded


def test_plotting_leaves_the_users_backend_and_pyplot_alone() -> None:
    code = """
import sys, matplotlib, torch
matplotlib.use("svg")
from hookscope.viz.charts import histogram_plot, gradient_flow_plot
from hookscope.stats.gradient_flow import FlowRow
histogram_plot({"a": torch.randn(10)})
gradient_flow_plot([FlowRow("a", 1.0, 2.0, 3)])
print(matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules)
"""
    assert run_python(code) == "svg False"


def test_histograms_of_a_structured_site_get_a_panel_per_key():
    """A site returning (a, b) is drawn as two panels titled with their keys, each from its own tensor."""
    import hookscope
    from hookscope.viz.charts import _site_panels  # the panels behind the picture

    class Two(torch.nn.Module):
        def forward(self, x):
            return x, x * 10

    net = torch.nn.Sequential(Two(), torch.nn.ReLU())
    x = torch.randn(4, 3)
    with hookscope.capture(net, ["0", "1"]) as cap:
        net[1](net[0](x)[0])
    panels = _site_panels(cap, "output")
    assert list(panels) == ["0 out[0]", "0 out[1]", "1"]
    assert torch.equal(panels["0 out[1]"], (x * 10).flatten())
    hookscope.histogram_plot(cap)  # draws
