"""attention_grid's pixels and the notebook view of an Attention: colours where the weights are, tokens escaped."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import hookscope
from hookscope.errors import OptionError
from hookscope.transformer.attention import Attention
from tests.transformer.hostile import HOSTILE

YELLOW = (253, 231, 37)  # viridis(1.0)


def _attention(weights: torch.Tensor, tokens: list[str], mask: list[bool] | None = None) -> Attention:
    keep = torch.tensor([mask or [True] * len(tokens)])
    return Attention(layers=["block.attn"], tokens=[tokens], mask=keep, probs={"block.attn": weights})


def test_one_head_draws_its_weights_where_they_are() -> None:
    weights = torch.eye(4)[None, None] * 0.9 + 0.025  # (1, 1, 4, 4): each token looks at itself
    image = hookscope.attention_grid(_attention(weights, ["aa", "bb", "cc", "dd"]), 0)
    pixels = np.asarray(image).astype(int)
    ys, xs = np.nonzero(np.abs(pixels - np.array(YELLOW)).sum(-1) <= 3)  # full colour: the head's maximum
    cell = round(math.sqrt(len(xs) / 4))
    assert cell >= 4 and len(xs) == 4 * cell * cell  # four square cells
    assert np.array_equal((xs - xs.min()) // cell, (ys - ys.min()) // cell)  # on the diagonal, query i at key i
    assert xs.max() - xs.min() + 1 == 4 * cell


def test_padding_is_left_out_and_panels_are_heads_and_mean() -> None:
    weights = torch.full((1, 3, 5, 5), 0.2)
    full = hookscope.attention_grid(_attention(weights, ["a", "b", "c", "d", "e"]), 0)
    padded = hookscope.attention_grid(_attention(weights, ["a", "b", "c", "d", "e"], [True] * 3 + [False] * 2), 0)
    assert padded.size[1] < full.size[1]  # 3 rows of tokens, not 5
    one = hookscope.attention_grid(_attention(weights, list("abcde")), 0, heads=[1])
    assert one.size[0] < full.size[0]  # one panel, no mean
    with pytest.raises(OptionError, match=r"heads=\[3\] must name heads in 0..2"):
        hookscope.attention_grid(_attention(weights, list("abcde")), 0, heads=[3])
    with pytest.raises(OptionError, match="batch=1 is out of range"):
        hookscope.attention_grid(_attention(weights, list("abcde")), 0, batch=1)


def test_the_notebook_view_escapes_tokens(minilm: object, minilm_tokenizer: object) -> None:
    att = hookscope.attention(minilm, "The cat sat.", tokenizer=minilm_tokenizer)
    html = att._repr_html_()
    assert html is not None and html.count("<img ") == 6 and "<script" not in html
    assert all(name in html for name in att.layers)
    hostile = _attention(torch.full((1, 1, 2, 2), 0.5), [HOSTILE, "x"])._repr_html_() or ""
    assert HOSTILE not in hostile and "&lt;img src=x onerror=alert(1)&gt;" in hostile
    assert not re.search(r"<img(?![^>]*src=\"data:image/png)", hostile)  # every <img> is an inline PNG


def test_plot_draws_what_attention_grid_draws_and_table_has_a_line_per_layer() -> None:
    torch.manual_seed(0)
    weights = torch.softmax(torch.randn(2, 2, 4, 4), dim=-1)
    weights[1, :, :, 0] = 0.0
    weights[1, :, :, 1] = 1.0  # sequence 1: every token looks at token 1
    att = Attention(
        layers=["a.attn", "b.attn"],
        tokens=[["w", "x", "y", "z"], ["p", "q", "r", "s"]],
        mask=torch.ones(2, 4, dtype=torch.bool),
        probs={"a.attn": weights, "b.attn": weights.flip(-1)},
    )
    drawn = att.plot(1, batch=1, heads=[0])
    assert drawn.tobytes() == hookscope.attention_grid(att, 1, batch=1, heads=[0]).tobytes()
    assert att.plot().tobytes() == hookscope.attention_grid(att, 0).tobytes()
    lines = att.table(batch=1).splitlines()
    assert lines[0].split() == ["layer", "heads", "shape", "most", "looked", "at"] and len(lines) == 3
    assert lines[1].split() == ["a.attn", "2", "2x2x4x4", "q", "(1.00)"]  # all of each row's weight on q
    assert lines[2].split()[:3] == ["b.attn", "2", "2x2x4x4"] and lines[2].split()[3] == "r"  # flipped: r
    summed = weights[0].mean(0).sum(0)  # sequence 0, head mean: the weight each key receives
    top = int(summed.argmax())
    first = att.table().splitlines()[1].split()
    assert first[3] == "wxyz"[top] and first[4] == f"({float(summed[top]) / 4:.2f})"
