"""The text report in headless Chromium: no console errors, every image decoded, token labels escaped.

Screenshots go to test-artifacts/ (ignored by git) so a person can look at what the test saw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from hookscope.cli import main
from hookscope.transformer.page import build_text_report, with_attributions
from hookscope.transformer.text_views import write_text_report
from hookscope.viz.highlight import token_html
from tests.browser import open_page, undecoded_images
from tests.transformer.conftest import tiny_gpt2  # noqa: F401  (the fixture)
from tests.transformer.hostile import HOSTILE, HostileTokenizer

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _look(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def test_the_minilm_demo_works_in_chromium(chromium: Any, tmp_path: Path) -> None:
    assert main(["demo", "--model", "minilm", "--out", str(tmp_path / "demo")]) == 0
    page, problems = open_page(chromium, tmp_path / "demo" / "index.html")
    assert page.locator("section#attention img").count() == 6 * 3  # 6 layers, 3 sentences
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")  # lazy images come into view
    assert undecoded_images(page) == []
    first = page.locator("#text ul.tokens").first.inner_text().split()
    assert first == ["0", "[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]"]
    page.locator("details summary").first.click()
    cells = page.locator("#att-0 table.heat tbody tr").first.locator("td")
    assert cells.count() == 9  # [CLS] ... [SEP]: one per key
    assert page.locator("#norms table.heat").count() == 3
    _look(page, "demo-minilm.png")
    page.close()
    assert problems == []


def test_hostile_tokens_stay_text_in_chromium(chromium: Any, tmp_path: Path, tiny_gpt2: Any) -> None:  # noqa: F811
    inputs = {"input_ids": torch.tensor([[0, 1, 2, 3, 4, 7]])}
    report = build_text_report(tiny_gpt2, inputs, tokenizer=HostileTokenizer(), title=f"on {HOSTILE}")
    tokens = list(report.sentences[0])
    report = with_attributions(report, [(HOSTILE, token_html(tokens, [1.0, -1.0, 0.5, 0.0, 0.2, -0.2]))])
    index = write_text_report(report, tmp_path / "hostile")
    page, problems = open_page(chromium, index)
    page.on("dialog", lambda d: problems.append(f"dialog: {d.message}"))
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    assert undecoded_images(page) == []
    assert page.locator("script").count() == 0
    assert page.locator('img:not([src^="data:image/png"])').count() == 0  # no <img src=x> made of a token
    body = page.inner_text("body")
    assert body.count(HOSTILE) >= 5  # title, text, attributions, mean table, norm table: as text
    assert "<script>alert(2)</script>" in body
    labels = page.locator("#att-0 table.heat th.col").all_inner_texts()
    assert labels[:2] == [HOSTILE, "<script>alert(2)</script>"]
    _look(page, "text-hostile.png")
    page.close()
    assert problems == []


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
