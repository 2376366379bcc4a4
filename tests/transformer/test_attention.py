"""hookscope.attention against the eager model's own output_attentions, on the real MiniLM and a tiny GPT-2."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

import hookscope
from hookscope.errors import CaptureError, CaptureWarning, InputError, NotCapturedError, SelectionError
from hookscope.transformer.weights import attention_probs
from tests.transformer.test_linear import mamba, qwen3_next

SENTENCES = ["The cat sat on the mat.", "Dogs bark."]


def _eager_attentions(model: Any, inputs: Any) -> tuple[Any, tuple[torch.Tensor, ...]]:
    """The oracle: a copy switched to eager, asked for output_attentions."""
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        out = eager(**inputs, output_attentions=True)
    return out, out.attentions


def _registry() -> dict[str, Any]:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return dict(ALL_ATTENTION_FUNCTIONS._local_mapping)


def _configs(model: Any) -> list[tuple[str, Any]]:
    return [(n, m.config._attn_implementation) for n, m in model.named_modules() if hasattr(m, "config")]


@pytest.mark.parametrize("texts", [SENTENCES[:1], SENTENCES], ids=["one", "padded"])
def test_minilm_weights_equal_eager_output_attentions(minilm: Any, minilm_tokenizer: Any, texts: list[str]) -> None:
    model = minilm.double()
    inputs = minilm_tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        plain = model(**inputs).last_hidden_state
    registry, configs = _registry(), _configs(model)
    assert model.config._attn_implementation == "sdpa"

    att = hookscope.attention(model, inputs)

    eager_out, expected = _eager_attentions(model, inputs)
    assert len(att.layers) == len(expected) == 6
    for index, weights in enumerate(expected):
        assert att.weights(index).shape == weights.shape == (len(texts), 12, *inputs["input_ids"].shape[1:] * 2)
        torch.testing.assert_close(att.weights(index), weights, rtol=0, atol=1e-12)
    assert torch.equal(att.output.last_hidden_state, plain)  # the model's outputs in the block: bit for bit
    print("eager vs sdpa:", (eager_out.last_hidden_state - plain).abs().max().item())
    assert _registry() == registry and _configs(model) == configs
    assert hookscope.find_hooks(model) == []


def test_minilm_padding_is_honoured(minilm: Any, minilm_tokenizer: Any) -> None:
    model = minilm.double()
    padded = minilm_tokenizer(SENTENCES, padding=True, return_tensors="pt")
    alone = minilm_tokenizer(SENTENCES[1:], return_tensors="pt")
    att = hookscope.attention(model, padded)
    att_alone = hookscope.attention(model, alone)
    real = int(padded["attention_mask"][1].sum())
    assert att.mask[1].tolist() == [True] * real + [False] * (padded["input_ids"].shape[1] - real)
    for layer in att.layers:
        weights = att.weights(layer)
        assert weights[1, :, :, real:].abs().max() == 0  # no query looks at padding
        torch.testing.assert_close(weights[1].sum(-1), torch.ones_like(weights[1].sum(-1)), rtol=0, atol=1e-12)
        torch.testing.assert_close(weights[1, :, :real, :real], att_alone.weights(layer)[0], rtol=0, atol=1e-12)
    # the padded sentence's outputs are the sentence's own: padding changed nothing it computes
    torch.testing.assert_close(
        att.output.last_hidden_state[1, :real], att_alone.output.last_hidden_state[0], rtol=0, atol=1e-10
    )


@pytest.mark.parametrize("padded", [False, True])
def test_gpt2_causal_weights_equal_eager(tiny_gpt2: Any, padded: bool) -> None:
    torch.manual_seed(1)
    ids = torch.randint(0, 49, (2, 7))
    inputs: dict[str, torch.Tensor] = {"input_ids": ids}
    if padded:
        inputs["attention_mask"] = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    with torch.no_grad():
        plain = tiny_gpt2(**inputs).logits
    att = hookscope.attention(tiny_gpt2, inputs)
    _, expected = _eager_attentions(tiny_gpt2, inputs)
    assert att.layers == ["transformer.h.0.attn", "transformer.h.1.attn"]
    for index, weights in enumerate(expected):
        torch.testing.assert_close(att.weights(index), weights, rtol=0, atol=1e-12)
        assert torch.triu(att.weights(index), diagonal=1).abs().max() == 0  # causal
    assert torch.equal(att.output.logits, plain)
    assert att.tokens[0] == [str(int(i)) for i in ids[0]]  # no tokenizer: the ids
    assert tiny_gpt2.config._attn_implementation == "sdpa"


def test_an_eager_model_gives_its_own_weights(tiny_gpt2: Any) -> None:
    tiny_gpt2.set_attn_implementation("eager")
    inputs = {"input_ids": torch.tensor([[3, 1, 4, 1, 5]])}
    with torch.no_grad():
        expected = tiny_gpt2(**inputs, output_attentions=True).attentions
    att = hookscope.attention(tiny_gpt2, inputs)
    assert all(torch.equal(att.weights(i), w) for i, w in enumerate(expected))
    assert tiny_gpt2.config._attn_implementation == "eager" and _registry() == {}


def test_text_layers_and_names(minilm: Any, minilm_tokenizer: Any) -> None:
    att = hookscope.attention(minilm, "Tokenization is fun", tokenizer=minilm_tokenizer, select="encoder.layer.1*")
    assert att.layers == ["encoder.layer.1.attention.self"]
    assert att.tokens == [["[CLS]", "token", "##ization", "is", "fun", "[SEP]"]]
    assert att.words(0) == [("[CLS]", [0]), ("tokenization", [1, 2]), ("is", [3]), ("fun", [4]), ("[SEP]", [5])]
    assert torch.equal(att.weights("encoder.layer.1"), att.weights(0))
    assert att.mean_heads(0).shape == (1, 6, 6)
    with pytest.raises(NotCapturedError, match=r"no attention ran at 'encoder.layer.2'"):
        att.weights("encoder.layer.2")
    with pytest.raises(NotCapturedError, match="out of range: 1 attention layers"):
        att.weights(3)
    with pytest.raises(InputError, match="text needs tokenizer="):
        hookscope.attention(minilm, "no tokenizer")
    with pytest.raises(SelectionError, match="holds 6 attention modules"):
        hookscope.attention(minilm, "a b", tokenizer=minilm_tokenizer).weights("encoder")


def test_registry_restored_when_forward_raises_and_when_nested(tiny_gpt2: Any) -> None:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    mine = ALL_ATTENTION_FUNCTIONS["sdpa"]
    ALL_ATTENTION_FUNCTIONS["sdpa"] = mine  # an earlier local override, put back exactly
    try:
        with pytest.raises(IndexError):
            hookscope.attention(tiny_gpt2, {"input_ids": torch.tensor([[60]])})  # id out of the vocabulary
        assert _registry() == {"sdpa": mine}
        inner = copy.deepcopy(tiny_gpt2)

        class Nested(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.outer = tiny_gpt2

            def forward(self, input_ids: torch.Tensor) -> Any:
                self.seen = hookscope.attention(inner, {"input_ids": input_ids})
                return self.outer(input_ids=input_ids)

        nested = Nested()
        outer = hookscope.attention(nested, {"input_ids": torch.tensor([[1, 2, 3]])}, select="outer")
        assert outer.layers == ["outer.transformer.h.0.attn", "outer.transformer.h.1.attn"]
        assert torch.equal(outer.weights(0), nested.seen.weights(0))
        assert _registry() == {"sdpa": mine}
    finally:
        del ALL_ATTENTION_FUNCTIONS["sdpa"]
    assert _registry() == {}


def test_a_model_without_hugging_face_attention_is_one_line() -> None:
    with pytest.raises(CaptureError, match="has no Hugging Face config naming an attention implementation"):
        hookscope.attention(torch.nn.Linear(2, 2), torch.zeros(1, 2))


def test_attention_probs_masks_by_hand() -> None:
    torch.manual_seed(0)
    query, key = torch.randn(2, 4, 3, 8, dtype=torch.float64), torch.randn(2, 2, 3, 8, dtype=torch.float64)
    keep = torch.tensor([[1, 1, 1], [1, 1, 0]])
    probs = attention_probs(query, key, keep, scaling=0.5, causal=True)
    for b, h, i in ((0, 0, 0), (1, 3, 2), (1, 1, 1)):
        k = key[b, h // 2]  # grouped-query: query heads 0, 1 read key head 0
        scores = (query[b, h, i] @ k.T) * 0.5
        allowed = [j for j in range(3) if j <= i and keep[b, j]]
        expected = torch.zeros(3, dtype=torch.float64)
        expected[allowed] = scores[allowed].softmax(0)
        torch.testing.assert_close(probs[b, h, i], expected, rtol=0, atol=1e-12)
    # a 4-D boolean mask equals the additive one; a fully masked row is uniform, as eager's is
    none = torch.zeros(2, 1, 3, 3, dtype=torch.bool)
    torch.testing.assert_close(attention_probs(query, key, none), torch.full((2, 4, 3, 3), 1 / 3, dtype=torch.float64))
    window = attention_probs(query, key, causal=True, window=2)
    assert window[0, 0, 2, 0] == 0 and window[0, 0, 2, 1] > 0


def test_torch_multihead_attention_and_transformer_encoder() -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    with torch.no_grad():
        plain = encoder(x, src_key_padding_mask=pad)
    att = hookscope.attention(encoder, {"src": x, "src_key_padding_mask": pad})
    assert att.layers == ["layers.0.self_attn", "layers.1.self_attn"] and att.tokens[1] == ["0", "1", "2", "3", "4"]
    assert att.mask[1].tolist() == [True, True, True, False, False]
    hidden = x
    for index, block in enumerate(encoder.layers):  # the oracle: torch's own weights, layer by layer
        with torch.no_grad():
            _, expected = block.self_attn(hidden, hidden, hidden, key_padding_mask=pad, average_attn_weights=False)
            hidden = block(hidden, src_key_padding_mask=pad)
        torch.testing.assert_close(att.weights(index), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(att.output, plain, rtol=0, atol=1e-12)  # the fused fast path is off: 1e-15 apart
    assert hookscope.find_hooks(encoder) == []


def test_a_renamed_implementation_would_drop_the_mask_ours_does_not(tiny_gpt2: Any) -> None:
    """Why the recorder keeps the implementation's name: a custom name without a mask function gets no mask."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    inputs = {
        "input_ids": torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]),
        "attention_mask": torch.tensor([[1] * 4, [0, 0, 1, 1]]),
    }
    with torch.no_grad():
        plain = tiny_gpt2(**inputs).logits
    AttentionInterface.register("renamed_sdpa", ALL_ATTENTION_FUNCTIONS["sdpa"])
    renamed = copy.deepcopy(tiny_gpt2)
    renamed.config._attn_implementation_internal = "renamed_sdpa"
    try:
        with torch.no_grad():
            dropped = renamed(**inputs).logits
    finally:
        del AttentionInterface._global_mapping["renamed_sdpa"]
    assert (dropped[1] - plain[1]).abs().max() > 1e-3  # left padding ignored: the mask was dropped
    assert torch.equal(hookscope.attention(tiny_gpt2, inputs).output.logits, plain)


def test_layers_is_the_old_name_of_select(tiny_gpt2: Any) -> None:
    inputs = {"input_ids": torch.tensor([[3, 1, 4, 1, 5]])}
    new = hookscope.attention(tiny_gpt2, inputs, select="transformer.h.1")
    with pytest.warns(
        DeprecationWarning, match=r"attention\(layers=...\) is deprecated.*attention\(select=...\)"
    ) as said:
        old = hookscope.attention(tiny_gpt2, inputs, layers="transformer.h.1")
    assert said[0].filename == __file__  # the warning names the caller's line, so Python shows it by default
    assert new.layers == old.layers == ["transformer.h.1.attn"]
    assert torch.equal(new.weights(0), old.weights(0))


def test_blocks_select_the_attention_inside_every_block(tiny_gpt2: Any) -> None:
    inputs = {"input_ids": torch.tensor([[3, 1, 4, 1, 5]])}
    every = hookscope.attention(tiny_gpt2, inputs)
    blocks = hookscope.attention(tiny_gpt2, inputs, select=":blocks")  # transformer.h.0, transformer.h.1
    assert blocks.layers == every.layers == ["transformer.h.0.attn", "transformer.h.1.attn"]
    assert all(torch.equal(blocks.weights(i), every.weights(i)) for i in range(2))


def test_a_hybrid_s_linear_layers_are_named_and_a_linear_only_model_is_refused() -> None:
    model = qwen3_next()  # layer 0: GatedDeltaNet, layer 1: softmax attention
    with pytest.warns(CaptureWarning) as caught:
        att = hookscope.attention(model, torch.randint(0, 64, (2, 5)))
    assert att.layers == ["model.layers.1.self_attn"]
    assert [str(w.message) for w in caught] == [
        "model.layers.0.linear_attn (gated delta rule) has no attention matrix: it is a linear-attention layer, "
        "with a recurrent state; hookscope.linear_attention(model, inputs) shows its gates, decay, state norms and "
        "token mixing"
    ]
    refused = r"no attention of MambaForCausalLM ran: backbone\.layers\.0\.mixer \(selective scan\), backbone"
    with pytest.raises(CaptureError, match=refused + r"\.layers\.1\.mixer \(selective scan\) have no attention matrix"):
        hookscope.attention(mamba(), torch.randint(0, 64, (2, 5)))
