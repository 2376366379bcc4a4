"""The report as a person reads it, in Chromium at 1280 and 400 px wide: nothing cut or overlapping,
the gradient-flow chart readable at 5 and at 200 layers and drawn as its text says, a line when a
search matches nothing, numbers and dates written for people.

Screenshots go to test-artifacts/ (ignored by git) so a person can look at what the test saw.
"""

from __future__ import annotations

import colorsys
import datetime
import itertools
import math
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.report.build import build_report
from hookscope.report.content import Report
from hookscope.report.from_store import build_report_from_store
from hookscope.report.html import format_number, render_html, write_report
from hookscope.stats.gradient_flow import gradient_flow
from tests.browser import boxes, open_page, overlapping, pseudo_line, undecoded_images

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
WIDTHS = (1280, 400)
MIN_FONT = 11  # px: the smallest text of the chart a person is asked to read
LAYERS = "_blocks.*.static_padding"  # names of the kind the issue saw cut from the left


def chain(scales: list[float]) -> nn.Sequential:
    """Linear layers whose weights are ``scale * I``: gradients grow or shrink by that factor per layer."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for scale in scales:
        layer = nn.Linear(8, 8, bias=False)
        nn.init.eye_(layer.weight)
        layer.weight.data *= scale
        layers.append(layer)
    return nn.Sequential(*layers, nn.Linear(8, 3)).double().eval()


class Block(nn.Module):
    """A block named as EfficientNet's are: its layer is ``_depthwise_conv.static_padding``."""

    def __init__(self) -> None:
        super().__init__()
        self._depthwise_conv = nn.Sequential(OrderedDict(static_padding=nn.Linear(6, 6)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self._depthwise_conv(x))


class Blocks(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self._blocks = nn.ModuleList(Block() for _ in range(n))
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self._blocks:
            x = block(x)
        return self.head(x)


class MemoryEfficientSwish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


class MBConvBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        padded = OrderedDict(static_padding=nn.ZeroPad2d(1), conv=nn.Conv2d(width, width, 3, groups=width))
        self._depthwise_conv = nn.Sequential(padded)
        self._bn1 = nn.BatchNorm2d(width)
        self._swish = MemoryEfficientSwish()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._swish(self._bn1(self._depthwise_conv(x)))


class EfficientNetLike(nn.Module):
    """EfficientNet's names, types and wide maps in three small blocks: the table the issue saw cut at 1280 px."""

    def __init__(self, width: int = 1152) -> None:
        super().__init__()
        self._conv_stem = nn.Conv2d(3, width, 1)
        self._blocks = nn.ModuleList(MBConvBlock(width) for _ in range(3))
        self._fc = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._conv_stem(x)
        for block in self._blocks:
            x = block(x)
        return self._fc(x.mean((2, 3)))


class NegativeRelu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return -torch.relu(x)


def five_blocks() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Blocks(5).eval(), torch.randn(2, 6)


@pytest.fixture(scope="module")
def five() -> Report:
    """Five long-named layers, all in the normal band, with a note and a remark for the badges."""
    model, x = five_blocks()
    return build_report(model, x, select=LAYERS, grads=True, notes=["random init, not trained"])


@pytest.fixture(scope="module")
def many() -> Report:
    """200 layers, a head, max_layers=64: gradients grow x1.4 a layer through the first 100, x0.7 the next 60."""
    model = chain([1.4] * 100 + [0.7] * 60 + [1.0] * 40)
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0)).double()
    return build_report(model, x, grads=True, max_layers=64)


@pytest.fixture(scope="module")
def efficient() -> Report:
    """Every section of the page: predictions, CAMs, gradient flow, the table and the cards."""
    torch.manual_seed(0)
    return build_report(EfficientNetLike().eval(), torch.rand(5, 3, 7, 7), select="_blocks.*", grads=True)


def test_the_formatter_writes_zero_without_a_sign() -> None:
    assert format_number(-0.0) == "0" and format_number(0.0) == "0" and format_number(0) == "0"
    assert format_number(-0.00012345) == "-1.23e-4"  # far from 1: a short mantissa and exponent
    assert format_number(-0.5) == "-0.5" and format_number(1234.6) == "1,235"
    assert format_number(None) == "–"


def test_a_median_of_negative_zeros_shows_as_0() -> None:
    x = torch.tensor([[-1.0, -2.0, -3.0, -4.0]])  # -relu(x) is -0.0 four times: every percentile is a zero
    report = build_report(nn.Sequential(NegativeRelu()).eval(), x, cam_methods=())
    assert report.layers[0].output is not None
    percentiles = report.layers[0].output.stats["percentiles"]
    assert percentiles["50"] == 0 and math.copysign(1, percentiles["50"]) == -1  # what summarize hands the page
    html = render_html(report)
    assert "<dt>p50</dt><dd>0</dd>" in html and "<dt>p99</dt><dd>0</dd>" in html
    assert "<dd>-0</dd>" not in html


def test_the_chart_names_what_it_draws_and_what_was_left_out(five: Report, many: Report) -> None:
    assert five.flow is not None and many.flow is not None
    assert [bar.name for bar in many.flow.bars] == [str(i) for i in range(201)]
    assert [bar.name for bar in five.flow.bars] == [f"_blocks.{i}._depthwise_conv.static_padding" for i in range(5)]
    assert len(many.layers) == 64
    text = render_html(many)
    assert "The chart draws all 201 layers that received a gradient, 137 more than the cards below." in text
    assert "more than the cards below" not in render_html(five)
    assert "all 5 layers lies between the lines" in render_html(five)
    assert many.flow.count("exploding") > 0 and many.flow.count("vanishing") > 0
    assert "Orange bars are vanishing" not in text and "also those left out below" not in text


def test_store_reports_date_the_store_for_people(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    with hookscope.capture(model, "0") as cap:
        model(torch.randn(2, 4))
    run = hookscope.save(cap, tmp_path / "run.hookscope")
    stored = datetime.datetime.fromisoformat(str(run.provenance["created"]))
    report = build_report_from_store(run)
    assert report.created == stored.strftime("%Y-%m-%d %H:%M ") + str(stored.tzname())
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d \S+", report.created)
    html = render_html(report)
    assert str(run.provenance["created"]) not in html and f"on {report.created};" in html


# -- in Chromium ---------------------------------------------------------------------------------
def view(chromium: Any, report: Report, folder: Path, width: int) -> tuple[Any, list[str]]:
    page, problems = open_page(chromium, write_report(report, folder, force=True))
    page.set_viewport_size({"width": width, "height": 900})
    page.emulate_media(reduced_motion="reduce")
    assert undecoded_images(page) == []
    return page, problems


def shot(page: Any, name: str, selector: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(selector).screenshot(path=str(ARTIFACTS / f"{name}.png"))


def colour(css: str) -> str:
    """'blue', 'orange' or 'red' for an rgb() colour, by its hue; 'other' otherwise."""
    r, g, b = (int(v) / 255 for v in re.findall(r"\d+(?:\.\d+)?", css)[:3])
    hue, _, saturation = colorsys.rgb_to_hls(r, g, b)
    degrees = hue * 360
    if saturation < 0.3:
        return "other"
    if 195 <= degrees <= 250:
        return "blue"
    if 20 <= degrees <= 45:
        return "orange"
    return "red" if degrees <= 10 or degrees >= 345 else "other"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("fixture", ["five", "many"])
def test_every_label_of_the_chart_is_whole_and_readable(
    chromium: Any, tmp_path: Path, request: pytest.FixtureRequest, fixture: str, width: int
) -> None:
    report: Report = request.getfixturevalue(fixture)
    page, problems = view(chromium, report, tmp_path / "report", width)
    card = boxes(page, "#flow-chart")[0]
    assert card["right"] <= width and card["scrollWidth"] <= card["clientWidth"]
    names = boxes(page, "#flow-chart .flow-name")
    assert [n["text"] for n in names] == [bar.name for bar in report.flow.bars]  # type: ignore[union-attr]
    rows = boxes(page, "#flow-chart .flow-rows li")
    for name, row in zip(names, rows, strict=True):
        assert card["left"] < name["left"] and name["right"] < card["right"], name["text"]
        assert row["top"] <= name["top"] and name["bottom"] <= row["bottom"], name["text"]
        assert name["scrollWidth"] <= name["clientWidth"] and name["font"] >= MIN_FONT, name["text"]
    ticks = boxes(page, "#flow-chart .flow-ticks span")
    assert len(ticks) >= 3 and all(t["font"] >= MIN_FONT for t in ticks)
    assert all(card["left"] < t["left"] and t["right"] < card["right"] for t in ticks)
    assert not any(overlapping(a, b) for a, b in itertools.pairwise(ticks))
    for el in boxes(page, "#flow-chart .flow-verdict, #flow-chart .flow-legend li, #flow h2, #flow .lead"):
        assert el["left"] >= 0 and el["right"] <= width and el["font"] >= MIN_FONT, el["text"]
    shot(page, f"flow-{len(names)}-layers-{width}px", "#flow")
    page.close()
    assert problems == []


@pytest.mark.parametrize("width", WIDTHS)
def test_the_chart_is_drawn_as_its_text_says(chromium: Any, tmp_path: Path, many: Report, width: int) -> None:
    page, problems = view(chromium, many, tmp_path / "report", width)
    lead = page.inner_text("#flow .lead")
    said = re.search(r"A bar is (\w+) between the two dashed lines, (\w+) below the vanishing line \(([^)]+)\) "
                     r"and (\w+) above the exploding line \(([^)]+)\)", lead)  # fmt: skip
    assert said, lead
    normal, low_word, vanish, high_word, explode = said.groups()
    ticks = [(t["left"] + t["right"]) / 2 for t in boxes(page, "#flow-chart .flow-ticks span")]
    labels = [float(t) for t in page.locator("#flow-chart .flow-ticks span").all_inner_texts()]
    track = boxes(page, "#flow-chart .flow-track")[0]
    decades = (math.log10(labels[-1]) - math.log10(labels[0])) / (ticks[-1] - ticks[0])  # per px

    def x_of(value: float) -> float:  # where the axis, as labelled, puts a value
        return ticks[0] + (math.log10(value) - math.log10(labels[0])) / decades

    for pseudo, threshold, word in (("::before", vanish, low_word), ("::after", explode, high_word)):
        line = pseudo_line(page, "#flow-chart .flow-track", pseudo)
        assert line["style"] == "dashed" and colour(line["color"]) == word
        assert line["left"] == pytest.approx(x_of(float(threshold)), abs=2)
    seen = set()
    for bar in boxes(page, "#flow-chart .bar"):
        value = float(bar["v"])
        exploding = value > float(explode) or math.isnan(value)
        expected = low_word if value < float(vanish) else high_word if exploding else normal
        assert colour(bar["background"]) == expected, bar
        seen.add(expected)
        if value > 0:
            assert bar["right"] == pytest.approx(min(x_of(value), track["right"]), abs=2)
    assert seen == {normal, low_word, high_word} == {"blue", "orange", "red"}
    for swatch, word in (("mean.normal", normal), ("mean.vanishing", low_word), ("mean.exploding", high_word)):
        assert colour(boxes(page, f"#flow-chart .flow-legend .swatch.{swatch}")[0]["background"]) == word
    page.close()
    assert problems == []


@pytest.mark.parametrize("width", WIDTHS)
def test_the_table_fits_the_page_and_says_when_nothing_matches(
    chromium: Any, tmp_path: Path, efficient: Report, width: int
) -> None:
    page, problems = view(chromium, efficient, tmp_path / "report", width)
    wrap = boxes(page, "#table .table-wrap")[0]
    assert wrap["scrollWidth"] <= wrap["clientWidth"] and wrap["right"] <= width  # no sideways scrolling
    inside = boxes(page, "#table .table-wrap *")
    wide = [e["text"][:40] for e in inside if e["visible"] and (e["width"] > width or e["right"] > wrap["right"])]
    assert wide == []
    grad, last = boxes(page, "#layer-table thead th")[-2:]
    assert grad["text"].lower().startswith("mean |grad|") and last["text"].lower() == "saved for backward"
    assert last["right"] <= wrap["right"]
    shot(page, f"table-{width}px", "#table")
    assert not page.is_visible("#layer-none")
    page.fill("#layer-search", "no-such-layer")
    assert page.is_visible("#layer-none") and not page.is_visible("#layer-table")
    assert page.inner_text("#layer-none") == "No layer matches “no-such-layer”."
    assert page.is_visible("#cards-none") and page.locator("article.layer:not([hidden])").count() == 0
    assert page.inner_text("#layer-count") == f"0 of {len(efficient.layers)} layers"
    page.fill("#layer-search", "")
    assert page.is_visible("#layer-table") and not page.is_visible("#layer-none")
    page.close()
    assert problems == []


@pytest.mark.parametrize("width", WIDTHS)
def test_badges_stand_apart_from_their_text(chromium: Any, tmp_path: Path, width: int) -> None:
    report = build_report(nn.Sequential(*(nn.Linear(3, 3) for _ in range(70))).eval(), torch.randn(1, 3), notes=["n"])
    page, problems = view(chromium, report, tmp_path / "report", width)
    tags, texts = boxes(page, ".callout .tag"), boxes(page, ".callout .text")
    assert len(tags) == len(texts) == 3  # the note, the layers left out, no CAM
    for tag, text in zip(tags, texts, strict=True):
        assert not overlapping(tag, text) and tag["right"] < text["left"], (tag["text"], text["text"])
        assert tag["scrollWidth"] <= tag["clientWidth"] and text["right"] <= width
    assert page.text_content(".callout.remark").startswith("hookscope: 6 more layers")  # copied text too
    shot(page, f"callouts-{width}px", ".callouts")
    page.close()
    assert problems == []


@pytest.mark.parametrize("width", WIDTHS)
def test_the_sticky_nav_leaves_each_section_heading_in_view(
    chromium: Any, tmp_path: Path, efficient: Report, width: int
) -> None:
    page, problems = view(chromium, efficient, tmp_path / "report", width)
    links = page.locator("nav.sections a")
    assert links.all_inner_texts() == ["Prediction", "CAM", "Gradient flow", "Graph", "Layer table", "Layers"]
    nav = boxes(page, "nav.sections")[0]
    assert nav["height"] <= 56 and nav["right"] <= width  # one row of links, however narrow
    for i in range(links.count()):
        target = links.nth(i).get_attribute("href")
        links.nth(i).click()
        page.wait_for_function("h => location.hash === h", arg=target)
        nav, heading = boxes(page, "nav.sections")[0], boxes(page, f"{target} > h2")[0]
        assert nav["bottom"] <= heading["top"] < 900, (target, heading["top"], nav["bottom"])
    page.close()
    assert problems == []


def test_the_gradients_drawn_are_those_autograd_gives(five: Report) -> None:
    model, x = five_blocks()
    with hookscope.capture(model, LAYERS, kinds=("grad_output",)) as cap:
        out = model(x)
        out.gather(1, out.argmax(1, keepdim=True)).sum().backward()
    rows = gradient_flow(cap)
    assert five.flow is not None and len(rows) == 5
    assert [b.mean_abs for b in five.flow.bars] == pytest.approx([r.mean_abs for r in rows], rel=1e-9)
    assert [b.max_abs for b in five.flow.bars] == pytest.approx([r.max_abs for r in rows], rel=1e-9)
