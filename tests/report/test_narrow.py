"""Every page kind at 1280 and 400 px in Chromium: nothing wider than the viewport, labels readable.

A 400-character module name, class name and token are the worst case of a long unbreakable word.
What may be wider than the screen (a table, a heatmap grid) scrolls inside its own box; the page
itself never scrolls sideways (``document.documentElement.scrollWidth <= innerWidth``) and no
element outside such a box reaches past the viewport. One page per kind, both widths per page.
Screenshots go to test-artifacts/ (ignored by git).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope import edits
from hookscope.base.words import shorten
from hookscope.edits.ablation import ablation
from hookscope.report.inline import capture_html, report_html
from hookscope.transformer.grid import FONT
from hookscope.transformer.page import build_text_report
from hookscope.viz.curves import curves_png
from tests.browser import open_page

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
LONG = "a" * 400  # a module name, a class name, a token: one word, no place to break
WIDTHS = (1280, 400)

# Every element outside a scrolling box, against the viewport (a scrolling box is measured itself),
# and every table cell whose text spills out of it (a name that does not wrap).
MEASURE = """() => {
  const width = window.innerWidth, wide = [];
  const boxed = e => { for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== "visible") return true; } return false; };
  for (const e of document.body.querySelectorAll("*")) {
    const r = e.getBoundingClientRect();
    if ((r.width || r.height) && (r.right > width + 0.5 || r.left < -0.5) && !boxed(e))
      wide.push(`${e.tagName.toLowerCase()}.${e.className} ${Math.round(r.left)}..${Math.round(r.right)}`);
  }
  const spill = [...document.querySelectorAll("td, th")].filter(c => c.scrollWidth > c.clientWidth + 1);
  return {scroll: document.documentElement.scrollWidth, inner: width, wide: wide.slice(0, 8),
          spill: spill.slice(0, 4).map(c => c.innerText.slice(0, 20))};
}"""


def check_widths(chromium: Any, index: Path, name: str, also: Any = None) -> None:
    """At each of WIDTHS: the page does not scroll sideways, no element is past the viewport, ``also(page)``."""
    page, problems = open_page(chromium, index)
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")  # lazy images come into view
        page.wait_for_timeout(100)
        page.evaluate("window.scrollTo(0, 0)")
        seen = page.evaluate(MEASURE)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"narrow-{name}-{width}.png"), full_page=True)
        assert not seen["wide"], f"{name} at {width} px: {seen}"
        assert seen["scroll"] <= seen["inner"] == width, f"{name} at {width} px: {seen}"
        assert not seen["spill"], f"{name} at {width} px: {seen}"
        if also is not None:
            also(page, width)
    page.close()
    assert problems == []


class Long(nn.Module):
    """A convolution net whose middle block has a 400-character name."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.add_module(LONG, nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(getattr(self, LONG)(self.stem(x)))


LABELS = [LONG, "cat", "dog", "fish"]


def test_the_image_report_and_its_edit_sections_fit_400_and_1280_px(chromium: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = Long().eval(), torch.rand(2, 3, 16, 16)
    cut = ablation(model, x, {f"{LONG}.0": edits.zero(channels=[0, 1])}, labels=LABELS)
    sweep = hookscope.patch_sweep(model, x[:1], x[1:], target=0, select=["stem.0", f"{LONG}.0"])
    report = hookscope.build_report(model, x, grads=True, labels=LABELS, notes=[LONG], sections=[cut, sweep])
    index = hookscope.write_report(report, tmp_path / "image")
    assert LONG in index.read_text()
    check_widths(chromium, index, "image", also=_wide_tables_show_they_scroll)


# Each table wider than its box: whether it scrolls, and whether a shadow on its edge says so.
WIDE_TABLES = """() => [...document.querySelectorAll("section table")].filter(t => t.scrollWidth > t.clientWidth + 1)
  .map(t => [t.closest("section").id, getComputedStyle(t).overflowX, getComputedStyle(t).backgroundAttachment])"""


def _wide_tables_show_they_scroll(page: Any, width: int) -> None:
    """At 400 px the ablation's tables are wider than the screen: they scroll in their box, with a visible cue."""
    wide = page.evaluate(WIDE_TABLES)
    if width == 400:
        assert "ablation" in {section for section, _, _ in wide}, wide
    for section, overflow, attachment in wide:
        assert overflow in ("auto", "scroll") and "local" in attachment, (section, overflow, attachment)


def test_the_training_report_fits_400_and_1280_px(chromium: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(OrderedDict([("in", nn.Linear(4, 8)), ("relu", nn.ReLU()), (LONG, nn.Linear(8, 3))]))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookscope.watch(model, opt, every=1, out=tmp_path / "run.hookscope"):
        for _ in range(4):
            loss = F.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 3, (8,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    page = hookscope.build_training_report(hookscope.load(tmp_path / "run.hookscope"))
    index = hookscope.write_report(page, tmp_path / "training")
    assert LONG in index.read_text()

    def rows_stay_rows(page: Any, width: int) -> None:  # a layer's cells side by side, not a letter a line
        heights = page.eval_on_selector_all("#layers tbody tr", "rs => rs.map(r => r.getBoundingClientRect().height)")
        assert len(heights) >= 3 and sorted(heights)[1] < 60, f"row heights at {width} px: {heights}"

    check_widths(chromium, index, "training", rows_stay_rows)


class Tokens:
    """A tokenizer whose third token is 400 characters long."""

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [LONG if i == 2 else f"t{i}" for i in ids]


def test_the_text_report_fits_and_its_head_labels_stay_readable(chromium: Any, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_head=12, n_embd=48, n_positions=16, vocab_size=20)
    model = transformers.GPT2LMHeadModel(config).eval()  # 12 heads and their mean, as MiniLM draws
    ids = {"input_ids": torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8]])}
    report = build_text_report(model, ids, tokenizer=Tokens(), title=LONG)
    index = hookscope.write_report(report, tmp_path / "text")

    def labels_readable(page: Any, width: int) -> None:  # the grid's FONT-pixel labels, as shown
        script = "is => is.map(i => i.getBoundingClientRect().width / i.naturalWidth)"
        scales = page.eval_on_selector_all("#attention figure img", script)
        assert scales and min(scales) * FONT >= 9, f"labels of {min(scales) * FONT:.1f} px at {width} px"

    check_widths(chromium, index, "text", labels_readable)


def test_the_notebook_views_fit_400_and_1280_px(chromium: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = Long().eval(), torch.rand(1, 3, 16, 16)
    with hookscope.capture(model, select=f"{LONG}*") as cap:
        model(x)
    report = hookscope.build_report(model, x, labels=LABELS, select=[f"{LONG}.0", "head.2"])
    views = capture_html(cap) + report_html(report)
    head = '<!DOCTYPE html><html lang="en"><meta charset="utf-8">'
    head += '<meta name="viewport" content="width=device-width, initial-scale=1"><title>views</title>'
    index = tmp_path / "views.html"
    index.write_text(f"{head}<body>{views}</body></html>", encoding="utf-8")
    check_widths(chromium, index, "views")


def test_charts_cut_a_long_name_in_the_middle_and_keep_their_axes() -> None:
    assert shorten("layer4.1.conv2") == "layer4.1.conv2"
    cut = shorten("x" * 10 + "y" * 380 + "z" * 10)
    assert len(cut) == 40 and cut.startswith("x" * 10) and cut.endswith("z" * 10) and "…" in cut
    series = {LONG: ([0, 1, 2], [1.0, 0.5, 0.2]), "b": ([0, 1, 2], [0.3, 0.2, 0.1])}
    png = curves_png(series, title="grad norm")  # constrained layout used to warn: axes collapsed to zero
    width = int.from_bytes(png[16:20], "big")
    assert width == 640  # 6.4 inches at 100 dpi: the name did not widen the figure
