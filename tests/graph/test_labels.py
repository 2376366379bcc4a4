"""Names never clipped: every label of the module graph fits its box (or frame), whole or shortened with
the full name on hover, and the page never scrolls sideways, in Chromium at 1280 and 400 px, on the
hand-written U-Net and an ``nn.Transformer`` seq2seq. The oracle is the browser's own text measure
(``getComputedTextLength``) against each box's rectangle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from hookscope.graph.labels import ELLIPSIS, fitted, frame_labels, text_width
from hookscope.report.build import build_report
from hookscope.report.html import write_report
from tests import handwritten
from tests.browser import open_page

ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"

MEASURED = """svg => [...svg.querySelectorAll("g.node, g.frame")].map(g => {
    const rect = g.querySelector("rect"), title = g.querySelector("title");
    const r = {x: rect.x.baseVal.value, w: rect.width.baseVal.value};
    return {frame: g.classList.contains("frame"), name: g.dataset.name || "", title: title ? title.textContent : "",
            texts: [...g.querySelectorAll("text")].map(t => ({text: t.textContent, x: t.x.baseVal[0].value,
                                                             w: t.getComputedTextLength()})), ...r}; })"""


class Translator(nn.Module):
    """The seq2seq on one tensor of source ids, its target the source shifted (a report takes one input)."""

    def __init__(self) -> None:
        super().__init__()
        self.seq2seq = handwritten.seq2seq()

    def forward(self, ids: Tensor) -> Tensor:
        return self.seq2seq(ids, ids[:, :-1])


def test_names_are_cut_to_fit_and_keep_what_tells_them_apart() -> None:
    wide = 152.0
    encoder, decoder = (fitted(f"transformer.{s}coder.layers.0.self_attn", wide, 11, bold=True) for s in ("en", "de"))
    assert encoder != decoder and encoder.endswith(".layers.0.self_attn") and encoder.startswith("t.")
    assert fitted("conv1", wide, 11) == "conv1"  # what fits stays whole
    long = fitted("x" * 80, wide, 11)
    assert ELLIPSIS in long and text_width(long, 11) <= wide and long.startswith("x") and long.endswith("x")
    frames = [("enc", "Enc", 0.0, 0.0, 300.0), ("enc.0", "Layer", 4.0, 3.0, 200.0), ("dec", "Dec", 0.0, 90.0, 300.0)]
    assert frame_labels(frames, 9) == {"enc": "enc › 0 · Layer", "enc.0": "", "dec": "dec · Dec"}


def pages(tmp_path: Path) -> dict[str, Path]:
    unet = build_report(handwritten.unet(), torch.randn(1, 3, 32, 32), cam_methods=(), max_layers=4)
    seq = build_report(Translator().eval(), torch.tensor([[1, 2, 3, 4, 5]]), cam_methods=(), max_layers=4)
    return {name: write_report(report, tmp_path / name) for name, report in (("unet", unet), ("seq2seq", seq))}


def test_no_label_is_clipped_and_the_page_does_not_scroll_sideways(chromium: Any, tmp_path: Path) -> None:
    for name, page in pages(tmp_path).items():
        for width in (1280, 400):
            tab, problems = open_page(chromium, page)
            tab.set_viewport_size({"width": width, "height": 900})
            tab.locator("#graph").scroll_into_view_if_needed()
            # the overview and each block drawn open below it
            drawn = tab.eval_on_selector_all("#graph svg.hs-graph", f"svgs => svgs.flatMap({MEASURED})")
            assert len([g for g in drawn if not g["frame"]]) > 10, name
            shortened = 0
            for g in drawn:
                for text in g["texts"]:
                    assert text["x"] + text["w"] <= g["x"] + g["w"] - 2, (name, width, text["text"])  # inside its box
                    if g["name"] and text is g["texts"][0] and text["text"] not in ("input", "output", g["name"]):
                        shortened += 1
                        assert g["title"].startswith(g["name"] + " ("), (name, g["name"])  # the full name on hover
                if g["frame"]:
                    assert g["title"], name
            if name == "seq2seq":
                assert shortened >= 5  # the transformer's long names were cut to fit, not clipped
            assert tab.evaluate("document.documentElement.scrollWidth") <= width + 1, (name, width)
            ARTIFACTS.mkdir(exist_ok=True)
            tab.locator("#graph").screenshot(path=str(ARTIFACTS / f"graph-{name}-{width}.png"))
            tab.close()
            assert problems == []


@pytest.mark.parametrize("text", ["transformer.decoder.layers.0.multihead_attn", "NonDynamicallyQuantizableLinear"])
def test_the_width_estimate_is_never_below_the_browsers(chromium: Any, text: str) -> None:
    tab = chromium.new_page()
    tab.set_content('<svg width="900" height="60" font-family="system-ui, sans-serif"><text id="b" x="0" y="20" '
                    f'font-size="11" font-weight="600">{text}</text><text id="r" x="0" y="40" font-size="9.5">'
                    f"{text}</text></svg>")  # fmt: skip
    bold = tab.evaluate("document.getElementById('b').getComputedTextLength()")
    regular = tab.evaluate("document.getElementById('r').getComputedTextLength()")
    tab.close()
    assert text_width(text, 11, bold=True) >= bold and text_width(text, 9.5) >= regular
