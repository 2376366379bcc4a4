"""Inline notebook views: every result class shows itself, escaped and self-contained; show() draws
the report's own layer cards; one view decodes its images in Chromium.

The hostile model names a module ``<b>x</b>`` and returns a dict whose key is markup: neither may
reach a view unescaped. A view may hold no URL: once its ``data:`` URIs are taken out, no
``http``, no ``//`` and no other ``src=`` is left.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.base.display import html_of
from hookscope.report import inline
from hookscope.report.build import build_report
from hookscope.report.html import render_html
from tests.browser import open_page, undecoded_images

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
NAME, KEY = "<b>x</b>", "<img src=x onerror=alert(1)>"
DATA_URI = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")


class Attributes(HTMLParser):
    """Every tag of a page, and the values of its attributes that load something (src, href, ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.links += [value or "" for name, value in attrs if name in ("src", "href", "srcset", "action", "poster")]


class Hostile(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add_module(NAME, nn.Conv2d(1, 3, 3))
        self.head = nn.Linear(3 * 6 * 6, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        maps = getattr(self, NAME)(x)
        return {KEY: self.head(maps.flatten(1)), "maps": maps}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One object of every result class, all made from the hostile model."""
    torch.manual_seed(0)
    model, x = Hostile(), torch.randn(2, 1, 8, 8, requires_grad=True)
    kinds = ("input", "output", "grad_input", "grad_output", "param_grad")
    with hookscope.capture(model, [NAME, "", "head"], kinds=kinds) as cap:
        model(x)[KEY].sum().backward()
    store = tmp_path_factory.mktemp("inline") / f"{NAME}.hookscope"
    hookscope.save(cap, store)
    report = build_report(model, x.detach(), select=[NAME, "head"], grads=True, output=KEY, cam_methods=())
    return {
        "Capture": cap,
        "Record": cap[NAME],
        "Record of the model": cap[""],
        "Call": cap[NAME].calls[0],
        "Summary": hookscope.summarize(cap[NAME].output),
        "RunningStats": hookscope.RunningStats().update(cap[NAME].output),
        "Run": hookscope.load(store),
        "Record of a store": hookscope.load(store)[NAME],
        "Report": report,
        "show(cap)": hookscope.show(cap),
    }


CLASSES = ["Capture", "Record", "Record of the model", "Call", "Summary", "RunningStats", "Run", "Report"]


@pytest.mark.parametrize("what", [*CLASSES, "Record of a store", "show(cap)"])
def test_every_view_is_escaped_and_fetches_nothing(results: dict[str, Any], what: str) -> None:
    page = results[what]._repr_html_()
    assert page.startswith('<div class="hookscope-view"><style>') and page.endswith("</div>")
    assert NAME not in page and "<img src=x" not in page and "<script" not in page.lower()
    if what not in ("Summary", "RunningStats"):
        assert "&lt;b&gt;x&lt;/b&gt;" in page
    bare = DATA_URI.sub("", page)
    assert "http" not in bare and "//" not in bare and "url(" not in bare
    links = Attributes()
    links.feed(page)
    assert links.tags and all(value.startswith("data:image/png;base64,") for value in links.links)
    assert "script" not in links.tags and "iframe" not in links.tags


def test_the_hostile_key_is_shown_escaped(results: dict[str, Any]) -> None:
    page = results["Record of the model"]._repr_html_()
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.parametrize("what", CLASSES)
def test_repr_stays_one_line(results: dict[str, Any], what: str) -> None:
    text = repr(results[what])
    assert "\n" not in text and len(text) < 400


def test_the_capture_table_names_each_site_with_its_numbers(results: dict[str, Any]) -> None:
    page = results["Capture"]._repr_html_()
    rows = re.findall(r"<tr>(.*?)</tr>", page)[1:]
    assert len(rows) == 3  # the model, the conv and the head, in forward order: conv, head, model
    conv = re.findall(r"<td[^>]*>(.*?)</td>", rows[0])
    assert conv[1:4] == ["&lt;b&gt;x&lt;/b&gt;", "Conv2d", "1"]
    assert "output (2, 3, 6, 6)" in conv[5] and "grad_output (2, 3, 6, 6)" in conv[5]
    held = sum(t.numel() * t.element_size() for t in results["Call"].tensors["output"].values())
    assert held == 2 * 3 * 6 * 6 * 4 and conv[7].startswith("<img")


def test_sites_over_the_cap_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    model = nn.Sequential(*[nn.ReLU() for _ in range(30)])
    with hookscope.capture(model) as cap:
        model(torch.ones(1, 2))
    page = cap._repr_html_()
    assert page.count("<tr>") == 1 + inline.MAX_ROWS
    assert "6 more sites not shown" in page


def test_show_draws_the_report_card_of_each_layer(results: dict[str, Any]) -> None:
    """hookscope.show(cap) and the report of the same model and input draw byte-equal layer cards."""
    torch.manual_seed(0)
    model, x = Hostile(), torch.randn(2, 1, 8, 8)
    with hookscope.capture(model, [NAME, "head"]) as cap, torch.no_grad():
        model(x)
    card = re.compile(r'<article class="card layer".*?</article>', re.S)
    shown = card.findall(hookscope.show(cap, kinds=["output"])._repr_html_())
    page = card.findall(render_html(build_report(model, x, select=[NAME, "head"], output=KEY, cam_methods=())))
    assert len(shown) == 2 and shown == page


def test_a_record_and_a_call_have_a_picture(results: dict[str, Any]) -> None:
    for what in ("Record", "Call"):
        png = results[what]._repr_png_()
        assert png is not None and png.startswith(b"\x89PNG")
    assert results["Summary"]._repr_png_() is None


def test_show_refuses_what_it_cannot_draw() -> None:
    with pytest.raises(hookscope.OptionError, match=r"hookscope\.show draws"):
        hookscope.show(3)
    assert html_of(3) is None
    with pytest.raises(hookscope.OptionError, match="got 'outputs'"):
        hookscope.show({}, kinds=["outputs"])


def test_a_view_decodes_its_images_in_chromium(chromium: Any, results: dict[str, Any], tmp_path: Path) -> None:
    body = "".join(results[what]._repr_html_() for what in ("Capture", "Record", "Call", "show(cap)"))
    path = tmp_path / "views.html"
    path.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{body}</body></html>")
    page, problems = open_page(chromium, path)
    assert page.locator("img").count() >= 8
    assert undecoded_images(page) == []
    assert problems == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "inline-views.png"), full_page=True)
    page.close()
