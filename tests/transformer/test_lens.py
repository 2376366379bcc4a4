"""The logit lens on a random-config GPT-2: the last layer is the model's own logits, an earlier one
the hand computation from ``output_hidden_states``; token strings and their HTML escaped."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import hookscope
from hookscope.base.display import html_of
from hookscope.errors import OptionError, SelectionError


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
        tiny_gpt2, ids, select="re:transformer\\.h\\.\\d+", norm=tiny_gpt2.transformer.ln_f, unembed=tiny_gpt2.lm_head,
        top_k=3,
    )  # fmt: skip
    assert lens.layers == ["transformer.h.0", "transformer.h.1"]
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


def test_unembed_and_norm_default_to_the_models_own(tiny_gpt2: Any) -> None:
    ids = _ids()
    lens = hookscope.logit_lens(tiny_gpt2, ids, top_k=4)  # lm_head and transformer.ln_f found
    with torch.no_grad():
        top = torch.softmax(tiny_gpt2(ids).logits, dim=-1).topk(4, dim=-1)
    assert torch.equal(lens.ids[-1], top.indices) and torch.equal(lens.probs[-1], top.values)
    explicit = hookscope.logit_lens(tiny_gpt2, ids, norm=tiny_gpt2.transformer.ln_f, unembed=tiny_gpt2.lm_head, top_k=4)
    assert torch.equal(lens.probs, explicit.probs)


def test_a_model_without_them_is_told_what_to_pass(tiny_gpt2: Any) -> None:
    bare = tiny_gpt2.transformer  # GPT2Model: blocks and ln_f, no lm_head
    with pytest.raises(OptionError, match=r"GPT2Model has no get_output_embeddings\(\).*pass unembed="):
        hookscope.logit_lens(bare, _ids())
    blocks = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    with pytest.warns(hookscope.CaptureWarning, match=r"found no final norm in Sequential.*pass norm="):
        lens = hookscope.logit_lens(blocks, torch.randn(1, 2, 4), unembed=torch.nn.Identity(), select="0", top_k=2)
    hidden = blocks[0](torch.randn(1, 2, 4))
    assert lens.ids.shape == (1, 1, 2, 2) and hidden.shape == (1, 2, 4)
    quiet = hookscope.logit_lens(
        blocks, torch.randn(1, 2, 4), unembed=torch.nn.Identity(), norm=None, select="0", top_k=2
    )
    assert quiet.layers == ["0"]  # norm=None: no norm, nothing to say


def test_text_goes_through_the_tokenizer(tiny_gpt2: Any) -> None:
    class Letters:
        pad_token, eos_token = "z", "z"

        def __call__(self, texts: list[str], **options: Any) -> dict[str, torch.Tensor]:
            return {"input_ids": torch.tensor([[ord(c) % 50 for c in text] for text in texts])}

        def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
            return [f"t{i}" for i in ids]

    lens = hookscope.logit_lens(tiny_gpt2, "abc", tokenizer=Letters(), top_k=1)
    assert lens.inputs == [["t47", "t48", "t49"]]
    with pytest.raises(hookscope.InputError, match="text needs tokenizer="):
        hookscope.logit_lens(tiny_gpt2, ["abc"])


def test_table_and_plot_show_the_top_guess(tiny_gpt2: Any) -> None:
    lens = hookscope.logit_lens(tiny_gpt2, _ids(), top_k=2, tokenizer=Vocabulary())
    lines = lens.table(row=1).splitlines()
    assert len(lines) == 3 and lines[0].split()[:2] == ["t" + str(int(_ids()[1, 0])), "t" + str(int(_ids()[1, 1]))]
    first = f"t{int(lens.ids[1, 1, 0, 0])} {float(lens.probs[1, 1, 0, 0]):.2f}"
    assert lines[2].startswith("transformer.h.1") and lines[2].split()[1:3] == first.split()
    image = lens.plot()
    assert image.mode == "RGB" and image.width > 100 and image.height > 50
    with pytest.raises(OptionError, match="row=2 is out of range: the lens holds 2 rows"):
        lens.table(row=2)


def test_old_keywords_warn_and_work(tiny_gpt2: Any) -> None:
    ids = _ids()
    new = hookscope.logit_lens(tiny_gpt2, ids, select="transformer.h.1", top_k=3)
    with pytest.warns(DeprecationWarning, match=r"logit_lens\(blocks=...\) is deprecated.*logit_lens\(select=...\)"):
        old = hookscope.logit_lens(tiny_gpt2, ids, blocks="transformer.h.1", top_k=3)
    with pytest.warns(DeprecationWarning, match=r"logit_lens\(k=...\) is deprecated.*logit_lens\(top_k=...\)"):
        old_k = hookscope.logit_lens(tiny_gpt2, ids, select="transformer.h.1", k=3)
    assert new.layers == old.layers == old_k.layers == ["transformer.h.1"]
    assert torch.equal(new.ids, old.ids) and torch.equal(new.ids, old_k.ids)


def test_a_glob_selects_as_everywhere_and_blocks_are_asked_for_by_name(tiny_gpt2: Any) -> None:
    """ "transformer.h.*" is the blocks and their parts in logit_lens as in capture: a lens of whole blocks
    refuses it, naming ':blocks' and the regular expression of the blocks; ':blocks' and None are the blocks."""
    glob = [name for name, _ in hookscope.select_modules(tiny_gpt2, "transformer.h.*")]
    assert len(glob) == 2 * 13  # each block and its 12 parts
    warned = pytest.warns(hookscope.CaptureWarning, match="attn_dropout")  # SDPA does not call it (tests/core)
    with warned, hookscope.capture(tiny_gpt2, "transformer.h.*") as cap, torch.no_grad():
        tiny_gpt2(_ids())
    assert list(cap) == glob
    message = (
        r"select='transformer.h.\*' also picks 24 modules inside the others \(transformer.h.0.ln_1, "
        r"transformer.h.0.attn, transformer.h.0.attn.c_attn and 21 more\).*select=':blocks', or name them "
        r"\(select='re:transformer\\\\.h\\\\.\\\\d\+'\)"
    )
    with pytest.raises(SelectionError, match=message):
        hookscope.logit_lens(tiny_gpt2, _ids(), select="transformer.h.*", unembed=tiny_gpt2.lm_head)
    for select in (":blocks", None, "re:transformer\\.h\\.\\d+", ["transformer.h.0", "transformer.h.1"]):
        lens = hookscope.logit_lens(tiny_gpt2, _ids(), select=select, unembed=tiny_gpt2.lm_head)
        assert lens.layers == ["transformer.h.0", "transformer.h.1"], select
