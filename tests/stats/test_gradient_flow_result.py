"""gradient_flow's result: still the sequence of rows it was, with .rows, .table(), .plot() and a notebook view."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookscope
from hookscope.stats.gradient_flow import FlowRow, GradientFlow


@pytest.fixture
def cap() -> hookscope.Capture:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    with hookscope.capture(model, kinds=("output", "grad_output")) as cap:
        model(torch.randn(5, 4)).pow(2).sum().backward()
    return cap


def test_it_is_still_the_sequence_of_its_rows(cap: hookscope.Capture) -> None:
    flow = hookscope.gradient_flow(cap)
    assert isinstance(flow, GradientFlow) and flow.kind == "grad_output"
    assert [row.name for row in flow] == ["0", "1", "2"] and len(flow) == 3
    assert flow[0] is flow.rows[0] and flow[-1] is flow.rows[2] and flow[:2] == list(flow.rows[:2])
    assert flow == list(flow.rows) and flow == hookscope.gradient_flow(cap) and flow != flow.rows[:2]
    expected = (2 * cap["2"].calls[0].get("output")).abs()  # d (sum y^2) / dy = 2y: the last row's oracle
    assert flow[2].mean_abs == pytest.approx(float(expected.double().mean()))
    assert flow[2].max_abs == pytest.approx(float(expected.max())) and flow[2].count == 15


def test_table_is_a_row_per_site_with_the_rows_numbers(cap: hookscope.Capture) -> None:
    flow = hookscope.gradient_flow(cap)
    lines = flow.table().splitlines()
    assert lines[0].split() == ["site", "mean", "|grad|", "max", "|grad|", "elements"]
    assert lines[-1] == "kind: grad_output"
    for line, row in zip(lines[1:-1], flow, strict=True):
        name, mean, top, count = line.split()
        assert (name, float(mean), float(top), int(count)) == (
            row.name,
            pytest.approx(row.mean_abs, rel=1e-3),
            pytest.approx(row.max_abs, rel=1e-3),
            row.count,
        )
    assert GradientFlow([], "param_grad").table() == "no site holds param_grad"


def test_plot_is_the_chart_of_gradient_flow_plot(cap: hookscope.Capture) -> None:
    flow = hookscope.gradient_flow(cap)
    image = flow.plot(vanish=1e-5)
    drawn = hookscope.gradient_flow_plot(cap, vanish=1e-5)
    assert image.mode == "RGB" and image.size == drawn.size and image.tobytes() == drawn.tobytes()
    assert 400 < image.width < 2000 and 200 < image.height < 1500


def test_the_notebook_view_holds_the_chart_and_the_table(cap: hookscope.Capture) -> None:
    html = hookscope.gradient_flow(cap)._repr_html_()
    assert isinstance(html, str) and html.count("<tr>") == 4 and "data:image/png;base64," in html
    empty = GradientFlow([FlowRow("a", 1.0, 2.0, 3)][:0], "grad_input")._repr_html_()
    assert isinstance(empty, str) and "no site holds grad_input" in empty
