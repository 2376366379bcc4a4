"""The training report of a watch store, in headless Chromium: alerts on top, the NaN's origin marked, images decode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope.cli import main
from tests.browser import open_page, undecoded_images

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 steps of a small MLP with a dead ReLU and a NaN fed in at step 9, logged every step."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
    with torch.no_grad():
        model[2].bias[:10] = -40.0
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    out = tmp_path_factory.mktemp("training") / "run.hookscope"
    with hookscope.watch(model, opt, every=1, out=out):
        for step in range(12):
            x = torch.randn(16, 8)
            x[0, 0] = float("nan") if step == 9 else x[0, 0]
            loss = F.cross_entropy(model(x), torch.randint(0, 3, (16,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.set_num_threads(threads)
    return out


def test_the_report_holds_the_alerts_and_the_origin(store: Path, tmp_path: Path) -> None:
    assert main(["report", "--from", str(store), "--out", str(tmp_path / "page")]) == 0
    html = (tmp_path / "page" / "index.html").read_text()
    assert "First non-finite value" in html and "<code>0</code> at step 9" in html
    assert html.index('id="alerts"') < html.index('id="curves"') < html.index('id="layers"')
    assert "http://" not in html and "https://" not in html and "<script" not in html


def test_the_training_report_works_in_chromium(chromium: Any, store: Path, tmp_path: Path) -> None:
    assert main(["report", "--from", str(store), "--out", str(tmp_path / "page")]) == 0
    page, problems = open_page(chromium, tmp_path / "page" / "index.html")
    page.mouse.wheel(0, 20000)  # lazy images load as they scroll into view
    page.wait_for_timeout(200)
    assert page.locator("img").count() == 4 + 5  # 4 charts, a sparkline per layer
    assert undecoded_images(page) == []
    rows = page.eval_on_selector_all("#alerts tbody tr", "rs => rs.map(r => r.innerText.split('\\t').slice(0, 3))")
    assert ["9", "0", "non_finite"] in rows and ["2", "3", "dead"] in rows
    assert page.is_visible("#first-non-finite")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "training-report.png"), full_page=True)
    page.close()
    assert problems == []
