"""The text report: its numbers from the model itself, every token escaped, the attribution section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import hookscope
from hookscope.errors import OutputExistsError
from hookscope.transformer.page import build_text_report, with_attributions
from hookscope.transformer.text_views import render_text_html, write_text_report
from hookscope.viz.highlight import token_html
from tests.transformer.conftest import tiny_gpt2  # noqa: F401  (the fixture)
from tests.transformer.hostile import HOSTILE, VOCAB, HostileTokenizer
from tests.transformer.test_linear import mamba, qwen3_next

IDS = torch.tensor([[0, 1, 2, 3, 4, 7], [6, 7, 0, 5, 9, 9]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])


@pytest.fixture
def report(tiny_gpt2: Any) -> Any:  # noqa: F811
    inputs = {"input_ids": IDS, "attention_mask": MASK}
    return build_text_report(tiny_gpt2, inputs, tokenizer=HostileTokenizer(), title=f"title {HOSTILE}")


def test_the_numbers_are_the_model_s(tiny_gpt2: Any, report: Any) -> None:  # noqa: F811
    with torch.no_grad():
        hidden = tiny_gpt2(input_ids=IDS, attention_mask=MASK, output_hidden_states=True).hidden_states
    assert [row.name for row in report.norms] == ["transformer.h.0", "transformer.h.1"]
    expected = hidden[1].norm(dim=-1)  # block 0's output, per token
    assert report.norms[0].norms[0] == pytest.approx(expected[0].tolist(), abs=1e-4)
    assert report.norms[0].norms[1] == pytest.approx(expected[1, :4].tolist(), abs=1e-4)  # padding left out
    assert report.sentences[1] == tuple(VOCAB[i] for i in IDS[1, :4].tolist())
    att = hookscope.attention(tiny_gpt2, {"input_ids": IDS, "attention_mask": MASK})
    mean = att.mean_heads(0)[1, :4, :4]
    drawn = torch.tensor(report.attention[0].means[1].rows, dtype=mean.dtype)
    torch.testing.assert_close(drawn, mean, rtol=0, atol=1e-4)
    assert [layer.name for layer in report.attention] == att.layers
    assert all(len(layer.grids) == 2 for layer in report.attention)


def test_every_token_is_escaped(report: Any) -> None:
    html = render_text_html(report)
    assert HOSTILE not in html and "<script>alert" not in html
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") >= 4  # title, text, mean tables, norm tables
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html and "a&amp;b" in html
    assert 'id="attributions"' not in html  # no section without attributions


def test_attributions_have_their_section(report: Any, tmp_path: Path) -> None:
    tokens = list(report.sentences[0])
    shaded = with_attributions(report, [("similarity to sentence 1", token_html(tokens, [0.5] * len(tokens)))])
    html = render_text_html(shaded)
    assert 'id="attributions"' in html and "similarity to sentence 1" in html and HOSTILE not in html
    index = write_text_report(shaded, tmp_path / "r")
    assert index.read_text(encoding="utf-8") == html.replace(shaded.created, shaded.created)
    with pytest.raises(OutputExistsError, match=r"already exists; pass force=True to replace it"):
        write_text_report(shaded, tmp_path / "r")
    (tmp_path / "r" / "notes.txt").write_text("mine")  # force replaces hookscope's page, never the user's file
    with pytest.raises(OutputExistsError, match=r"holds 1 file hookscope did not write \(notes\.txt\)"):
        write_text_report(shaded, tmp_path / "r", force=True)
    assert (tmp_path / "r" / "notes.txt").read_text() == "mine" and index.read_text(encoding="utf-8") == html


def test_a_hybrid_s_page_says_which_layers_have_no_attention_matrix() -> None:
    page = build_text_report(qwen3_next(), torch.randint(0, 64, (1, 5)))
    assert [layer.name for layer in page.attention] == ["model.layers.1.self_attn"]
    assert any(
        r.startswith("model.layers.0.linear_attn (gated delta rule) has no attention matrix") for r in page.remarks
    )
    assert "model.layers.0.linear_attn (gated delta rule) has no attention matrix" in render_text_html(page)


def test_a_mamba_s_page_shows_its_linear_attention_and_says_softmax_maps_do_not_exist() -> None:
    """Oracles: the model's own hidden states (the token norms) and ``hookscope.linear_attention`` run alone
    (its gates and state norms, checked against the model's cache in test_linear.py)."""
    model, ids = mamba(), torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    page = build_text_report(model, ids)
    alone = hookscope.linear_attention(model, ids)
    assert page.attention == () and page.linear is not None
    assert page.linear.layers == alone.layers == ["backbone.layers.0.mixer", "backbone.layers.1.mixer"]
    for name in alone.layers:
        torch.testing.assert_close(page.linear.calls[name].state_norms, alone.calls[name].state_norms, rtol=0, atol=0)
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states  # Mamba's: layer i's output at i
    assert [row.name for row in page.norms] == ["backbone.layers.0", "backbone.layers.1"]
    assert page.norms[0].norms[1] == pytest.approx(hidden[0][1].norm(dim=-1).tolist(), abs=1e-4)
    said = "softmax attention maps do not exist for MambaForCausalLM"
    assert page.remarks[0].startswith(said) and not any("left out" in r for r in page.remarks)
    html = render_text_html(page)
    assert "Softmax attention maps do not exist for MambaForCausalLM" in html and 'id="linear-attention"' in html
    assert "backbone.layers.1.mixer" in html and "2</b> linear-attention layers" in html
    assert page.table().splitlines()[1:] == alone.table().splitlines()
    assert "linear-attention layers" in repr(page)
