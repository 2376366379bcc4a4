"""The logit lens on a random-config GPT-2: the last layer is the model's own logits, an earlier one
the hand computation from ``output_hidden_states``; token strings and their HTML escaped."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import hookscope
from hookscope.display import html_of
from hookscope.errors import OptionError


class Vocabulary:
    """A stand-in tokenizer: id i is the string "t<i>", and id 3 is hostile markup."""

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return ["<img src=x onerror=alert(1)>" if i == 3 else f"t{i}" for i in ids]


def _ids() -> torch.Tensor:
    torch.manual_seed(1)
    ids = torch.randint(0, 50, (2, 9))
    ids[0, 4] = 3
    return ids


def test_last_layer_is_the_models_own_logits(tiny_gpt2: Any) -> None:
    ids = _ids()
    lens = hookscope.logit_lens(tiny_gpt2, ids, norm=tiny_gpt2.transformer.ln_f, unembed=tiny_gpt2.lm_head, top_k=5)
    assert lens.layers == ["transformer.h.0", "transformer.h.1"]
    assert lens.ids.shape == lens.probs.shape == (2, 2, 9, 5)
    with torch.no_grad():
        probs = torch.softmax(tiny_gpt2(ids).logits, dim=-1)
    top = probs.topk(5, dim=-1)
    assert torch.equal(lens.ids[-1], top.indices)
    assert torch.equal(lens.probs[-1], top.values)  # ln_f then lm_head, exactly as the model does


def test_an_intermediate_layer_equals_the_hand_computation(tiny_gpt2: Any) -> None:
    ids = _ids()
    with torch.no_grad():
        hidden = tiny_gpt2(ids, output_hidden_states=True).hidden_states[1]  # after block 0, before ln_f
        mean, var = hidden.mean(-1, keepdim=True), hidden.var(-1, keepdim=True, correction=0)
        ln = tiny_gpt2.transformer.ln_f
        normed = (hidden - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias
        top = torch.softmax(normed @ tiny_gpt2.lm_head.weight.T, dim=-1).topk(3, dim=-1)
    before = hookscope.find_hooks(tiny_gpt2)  # transformers leaves its own hooks for output_hidden_states
    lens = hookscope.logit_lens(
        tiny_gpt2, ids, select="transformer.h.*", norm=tiny_gpt2.transformer.ln_f, unembed=tiny_gpt2.lm_head, top_k=3
    )
    assert lens.layers == ["transformer.h.0", "transformer.h.1"]  # the blocks, not their parts
    assert torch.equal(lens.ids[0], top.indices)
    torch.testing.assert_close(lens.probs[0], top.values, rtol=1e-12, atol=1e-14)
    assert hookscope.find_hooks(tiny_gpt2) == before


def test_strings_and_html_are_escaped(tiny_gpt2: Any) -> None:
    ids = _ids()
    lens = hookscope.logit_lens(tiny_gpt2, ids, unembed=tiny_gpt2.lm_head, top_k=2, tokenizer=Vocabulary())
    assert lens.inputs is not None and lens.inputs[0][4] == "<img src=x onerror=alert(1)>"
    assert lens.tokens is not None and lens.tokens[1][0][2][0] == f"t{int(lens.ids[1, 0, 2, 0])}"
    page = html_of(lens)
    assert page is not None and "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script" not in page and "transformer.h.1" in page


def test_k_is_checked(tiny_gpt2: Any) -> None:
    with pytest.raises(OptionError, match="k must be a positive int"):
        hookscope.logit_lens(tiny_gpt2, _ids(), unembed=tiny_gpt2.lm_head, top_k=0)
    with pytest.raises(OptionError, match="top_k=51 is more than the 50 entries"):
        hookscope.logit_lens(tiny_gpt2, _ids(), unembed=tiny_gpt2.lm_head, top_k=51)
