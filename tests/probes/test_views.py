"""The top examples on a page, in Chromium at 1280 and 400 px: from a store, with patches, with tokens, A vs B."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.cli import main
from hookscope.probes.views import receptive_box, top_examples_html, top_examples_section, top_sections
from hookscope.reducers import top_examples
from hookscope.report.from_store import build_report_from_store
from hookscope.zoo import lenet
from tests.browser import open_page, undecoded_images
from tests.report.test_narrow import check_widths


def lenet_top(tmp_path: Path, name: str, model: nn.Module, x: torch.Tensor) -> hookscope.TopExamples:
    hookscope.extract(model, list(x.split(40)), select="relu2", out=tmp_path / name, reduce=top_examples(top_k=9),
                      progress=False)  # fmt: skip
    return hookscope.TopExamples.read(hookscope.load(tmp_path / name), "relu2")


def test_a_top_store_reports_each_unit_with_its_examples_and_histogram(chromium: Any, tmp_path: Path) -> None:
    model, (x, _) = lenet.lenet(), lenet.digits("test")
    x = x[:120]
    top = lenet_top(tmp_path, "top", model, x)
    run = hookscope.load(tmp_path / "top")
    stored = build_report_from_store(run, sections=top_sections(run))
    assert [s.id for s in stored.sections] == ["top-relu2"] and stored.layers == ()
    hookscope.write_report(stored, tmp_path / "stored")
    check_widths(chromium, tmp_path / "stored" / "index.html", "top-store")
    with torch.no_grad():
        model.conv2.weight[5] *= -1  # checkpoint B: one unit flipped
    moved = lenet_top(tmp_path, "b", model, x).difference(top)
    assert main(["report", "--from", str(tmp_path / "b"), "--against", str(tmp_path / "top"),
                               "--out", str(tmp_path / "ab")]) == 0  # fmt: skip
    page_ab = (tmp_path / "ab" / "index.html").read_text()
    assert "Change A to B: relu2" in page_ab and "Top examples: relu2" in page_ab
    assert page_ab.index("<b>unit 5</b>") > page_ab.index("Change A to B")  # the flipped unit leads the change
    sections = [top_examples_section(top, inputs=x, model=lenet.lenet()), top_examples_section(moved, inputs=x)]
    page = hookscope.build_report(model, x[:1], select="conv1", sections=sections)
    hookscope.write_report(page, tmp_path / "patches")
    check_widths(chromium, tmp_path / "patches" / "index.html", "top-patches")
    opened, problems = open_page(chromium, tmp_path / "patches" / "index.html")
    assert undecoded_images(opened) == [] and problems == []
    sizes = opened.eval_on_selector_all(".hs-top-card img", "imgs => imgs.slice(0, 72).map(i => i.naturalWidth)")
    assert max(sizes) <= 14  # relu2's receptive field on the 32x32 input: 5 + 1 + 4 * 2 = 14 pixels
    cards = opened.eval_on_selector_all(".hs-top-card img", "imgs => imgs.length")
    assert cards == 2 * 8 * 9  # two sections, 8 units each, 9 patches a unit
    opened.close()


def test_a_text_unit_shows_its_tokens_highlighted(chromium: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    layer = nn.Linear(4, 3)
    x = torch.randn(6, 7, 4)
    hookscope.extract(layer, [x[:3], x[3:]], out=tmp_path / "tok", reduce=top_examples(top_k=3), progress=False)
    top = hookscope.TopExamples.read(hookscope.load(tmp_path / "tok"), "")
    words = [[f"w{row}_{t}" for t in range(7)] for row in range(6)]
    html = str(top_examples_html(top, tokens=words))
    _, _, (position,) = top.where(top.ranked()[0], 0)
    assert f"w{top.input_index(top.ranked()[0], 0)}_{position}" in html and html.count("hs-top-card") >= 9
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "index.html").write_text(f"<!doctype html><meta charset=utf-8><body>{html}</body>")
    check_widths(chromium, tmp_path / "t" / "index.html", "top-tokens")


def test_the_receptive_box_is_the_hand_computed_field() -> None:
    """Two valid convolutions, 3x3 then 3x3 stride 2, no nonlinearity: cell (h, w) sees rows 2h..2h+4."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Conv2d(2, 3, 3, stride=2))
    image = torch.randn(1, 15, 15)
    for cell in [(0, 0), (2, 5), (5, 5)]:
        rows, cols = receptive_box(net, "1", image, 1, cell)
        assert (rows, cols) == (slice(2 * cell[0], 2 * cell[0] + 5), slice(2 * cell[1], 2 * cell[1] + 5))


def test_a_dead_activation_warns_and_draws_the_scaled_cell(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU())
    x = torch.rand(3, 1, 8, 8)
    hookscope.extract(net, [x], select="1", out=tmp_path / "d", reduce=top_examples(top_k=2), progress=False)
    top = hookscope.TopExamples.read(hookscope.load(tmp_path / "d"), "1")
    with torch.no_grad():
        net[0].bias.fill_(-100.0)  # every activation is now 0 behind the ReLU: no gradient reaches the input
    with pytest.warns(hookscope.CaptureWarning, match="zero gradient on its input, so its patch is the scaled"):
        html = str(top_examples_html(top, inputs=x, model=net))
    assert html.count("<img") == 2 + 2 * 2  # two histograms, two patches a unit
