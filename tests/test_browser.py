"""The demo reports in a real browser: no console errors, every image decoded, search, filter, sort.

Screenshots go to test-artifacts/ (ignored by git) so a person can look at what the test saw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hookscope.cli import main

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


def open_page(chromium: Any, index: Path) -> tuple[Any, list[str]]:
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on(
        "console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url}"))
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else problems.append(f"fetch: {r.url}"))
    page.goto(index.as_uri())
    page.wait_for_load_state("load")
    return page, problems


def undecoded_images(page: Any) -> list[str]:
    """Every <img> decoded by the browser (lazy ones are made eager first); the ones that fail."""
    script = """imgs => Promise.all(imgs.filter(i => i.getAttribute("src")).map(i => { i.loading = "eager";
        return i.decode().then(() => i.naturalWidth > 0 ? null : i.alt, () => i.alt || i.src.slice(0, 40)); }))
        .then(bad => bad.filter(b => b !== null))"""
    return page.eval_on_selector_all("img", script)


def visible_rows(page: Any) -> list[str]:
    return page.eval_on_selector_all(
        "#layer-table tbody tr:not([hidden])", "rows => rows.map(r => r.querySelector('td:nth-child(2)').innerText)"
    )


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

    page.click("#layer-table th:nth-child(5)")
    page.click("#layer-table th:nth-child(5)")
    means = page.eval_on_selector_all("#layer-table tbody td:nth-child(5)", "ts => ts.map(t => +t.dataset.v)")
    assert means == sorted(means, reverse=True)

    page.locator("img.zoom").first.click()
    assert page.is_visible("#lightbox")
    page.keyboard.press("Escape")
    assert not page.is_visible("#lightbox")

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "demo-efficientnet.png"), full_page=True)
    page.close()
    assert problems == []


def test_the_lenet_demo_works_in_chromium(chromium: Any, demo: dict[str, Path]) -> None:
    page, problems = open_page(chromium, demo["lenet"])
    assert undecoded_images(page) == []
    assert visible_rows(page) == ["conv1", "conv2", "fc1", "fc2", "fc3"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "demo-lenet.png"), full_page=True)
    page.close()
    assert problems == []
