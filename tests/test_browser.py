"""The demo reports in a real browser: no console errors, every image decoded, search, filter, sort.

Screenshots go to test-artifacts/ (ignored by git) so a person can look at what the test saw.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from hookscope.cli import main
from tests.browser import check_sort_and_lightbox, open_page, undecoded_images, visible_rows

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both demo reports, written by the CLI as a user would."""
    out = tmp_path_factory.mktemp("demo")
    pages = {}
    for model in ("efficientnet-lite0", "lenet"):
        assert main(["demo", "--model", model, "--out", str(out / model)]) == 0
        pages[model] = out / model / "index.html"
    return pages


def test_the_efficientnet_demo_works_in_chromium(chromium: Any, demo: dict[str, Path]) -> None:
    page, problems = open_page(chromium, demo["efficientnet-lite0"])
    assert page.locator("img").count() > 20
    assert undecoded_images(page) == []
    assert "Egyptian Mau" in page.inner_text("body")

    everything = visible_rows(page)
    assert len(everything) == 18  # _conv_stem, 16 blocks, _conv_head
    page.fill("#layer-search", "_blocks.1")
    assert visible_rows(page) == [n for n in everything if "_blocks.1" in n]  # 1, 10..15
    page.fill("#layer-search", "")
    page.select_option("#layer-type", "MBConvBlock")
    assert len(visible_rows(page)) == 16
    page.select_option("#layer-type", "")

    check_sort_and_lightbox(page)

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "demo-efficientnet.png"), full_page=True)
    page.close()
    assert problems == []


def test_the_efficientnet_demos_graph_draws_each_swish_call_as_a_box(demo: dict[str, Path]) -> None:
    """The demo's graph comes from the trace that gives a reused module a node per call (hookscope.graph.nodes)."""
    names = set(re.findall(r'data-name="([^"]+)"', demo["efficientnet-lite0"].read_text(encoding="utf-8")))
    assert {"_swish#0", "_swish#1", "_blocks.1._swish#0", "_blocks.1._swish#1", "_blocks.0._swish"} <= names
    assert not {"_swish", "_blocks.1._swish"} & names  # no box for a module called twice: one per call


def test_the_lenet_demo_works_in_chromium(chromium: Any, demo: dict[str, Path]) -> None:
    page, problems = open_page(chromium, demo["lenet"])
    assert undecoded_images(page) == []
    assert visible_rows(page) == ["conv1", "conv2", "fc1", "fc2", "fc3"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "demo-lenet.png"), full_page=True)
    page.close()
    assert problems == []
