"""hookscope.attention on models computing attention in their own modules, against their eager output_attentions.

DeBERTa-v2, GPT-Neo (a global and a local layer), BLOOM (ALiBi) and Falcon (rotary, and ALiBi)
from small random configs, eval, attn_implementation="eager", with a padded batch.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import hookscope
from hookscope.errors import CaptureError
from hookscope.transformer.own import OwnAttention, own_attention_modules

transformers = pytest.importorskip("transformers")

IDS = torch.tensor([[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 0, 0]])
MASK = torch.tensor([[1] * 7, [1, 1, 1, 1, 1, 0, 0]])
SMALL = {"vocab_size": 50, "hidden_size": 32}
NAMES = {
    "deberta_v2": "encoder.layer.{}.attention.self",
    "gpt_neo": "transformer.h.{}.attn.attention",
    "bloom": "transformer.h.{}.self_attention",
    "falcon": "transformer.h.{}.self_attention",
    "falcon_alibi": "transformer.h.{}.self_attention",
}


def _config(family: str) -> tuple[Any, Any]:
    """The model class and a small random config of ``family``: 2 layers, 2 heads, 32 wide."""
    if family == "deberta_v2":
        config = transformers.DebertaV2Config(
            **SMALL, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, relative_attention=True,
            pos_att_type=["p2c", "c2p"], position_buckets=8, max_relative_positions=16, max_position_embeddings=64,
        )  # fmt: skip
        return transformers.DebertaV2Model, config
    if family == "gpt_neo":
        config = transformers.GPTNeoConfig(
            **SMALL, num_layers=2, num_heads=2, attention_types=[[["global", "local"], 1]], window_size=3,
            max_position_embeddings=64, bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        return transformers.GPTNeoForCausalLM, config
    if family == "bloom":
        return transformers.BloomForCausalLM, transformers.BloomConfig(**SMALL, n_layer=2, n_head=2)
    config = transformers.FalconConfig(
        **SMALL, num_hidden_layers=2, num_attention_heads=2, alibi=family == "falcon_alibi", bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    return transformers.FalconForCausalLM, config


def _model(family: str, implementation: str = "eager") -> Any:
    cls, config = _config(family)
    torch.manual_seed(0)
    return cls._from_config(config, attn_implementation=implementation).eval()


def _main(output: Any) -> torch.Tensor:
    return output.logits if hasattr(output, "logits") else output.last_hidden_state


@pytest.mark.parametrize("family", list(NAMES))
def test_weights_equal_the_models_eager_output_attentions(family: str) -> None:
    model = _model(family)
    inputs = {"input_ids": IDS, "attention_mask": MASK}
    with torch.no_grad():
        plain = model(**inputs)
        oracle = model(**inputs, output_attentions=True).attentions
    att = hookscope.attention(model, inputs)
    assert att.layers == [NAMES[family].format(i) for i in range(2)]
    assert len(oracle) == 2
    for i, expected in enumerate(oracle):
        assert att.weights(i).shape == (2, 2, 7, 7)
        torch.testing.assert_close(att.weights(i), expected, rtol=0, atol=1e-6)
    assert torch.equal(_main(att.output), _main(plain))  # the outputs inside equal the outputs outside
    assert att.output.attentions is None  # the model was not asked for them
    assert att.mask.tolist() == MASK.bool().tolist()


@pytest.mark.parametrize("family", list(NAMES))
def test_padded_keys_get_no_weight_and_rows_sum_to_one(family: str) -> None:
    att = hookscope.attention(_model(family), {"input_ids": IDS, "attention_mask": MASK})
    for layer in att.layers:
        weights = att.weights(layer)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 7))
        assert weights[1, :, :5, 5:].abs().max() < 1e-12  # the real queries of sequence 1 never look at padding
        if family != "deberta_v2":  # causal: nothing above the diagonal
            assert torch.triu(weights[0], diagonal=1).abs().max() < 1e-12


def test_gpt_neo_weights_by_hand() -> None:
    """GPT-Neo's layer 0 from its own projections: softmax(q k^T) (no scaling), causal and padding masked."""
    model = _model("gpt_neo")
    inputs = {"input_ids": IDS, "attention_mask": MASK}
    with hookscope.capture(model, "transformer.h.0.ln_1") as cap, torch.no_grad():
        model(**inputs)
    attn = model.transformer.h[0].attn.attention
    x = cap["transformer.h.0.ln_1"].output

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.view(2, 7, 2, 16).transpose(1, 2)  # (B, heads, T, head)

    with torch.no_grad():
        scores = split(attn.q_proj(x)) @ split(attn.k_proj(x)).transpose(-1, -2)
    allowed = torch.ones(7, 7).tril().bool() & MASK.bool()[:, None, None, :]
    expected = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    weights = hookscope.attention(model, inputs).weights(0)
    torch.testing.assert_close(weights[0], expected[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(weights[1, :, :5], expected[1, :, :5], rtol=0, atol=1e-6)  # real query rows


OTHERS = {
    "deberta": lambda: transformers.DebertaModel(transformers.DebertaConfig(
        **SMALL, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, relative_attention=True,
        pos_att_type=["p2c", "c2p"], max_relative_positions=16,
    )),
    "mpt": lambda: transformers.MptForCausalLM(
        transformers.MptConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=2)
    ),
    "xlm": lambda: transformers.XLMModel(transformers.XLMConfig(vocab_size=50, emb_dim=32, n_layers=2, n_heads=2)),
    "funnel": lambda: transformers.FunnelBaseModel(transformers.FunnelConfig(
        vocab_size=50, d_model=32, n_head=2, d_head=16, d_inner=37, block_sizes=[1, 1],
    )),
}  # fmt: skip


@pytest.mark.parametrize("family", list(OTHERS))
def test_more_families_of_the_same_kind(family: str) -> None:
    torch.manual_seed(0)
    model = OTHERS[family]().eval()
    inputs = {"input_ids": IDS, "attention_mask": MASK}
    with torch.no_grad():
        oracle = model(**inputs, output_attentions=True).attentions
    att = hookscope.attention(model, inputs)
    assert len(att.layers) == len(oracle) == 2
    for i, expected in enumerate(oracle):
        torch.testing.assert_close(att.weights(i), expected, rtol=0, atol=1e-6)


def test_a_module_returning_something_else_second_is_one_line() -> None:
    torch.manual_seed(0)
    model = transformers.XLNetModel(
        transformers.XLNetConfig(vocab_size=50, d_model=32, n_layer=2, n_head=2, d_inner=37)
    )
    with pytest.raises(CaptureError, match=r"returned NoneType second.*model\(\.\.\., output_attentions=True\)"):
        hookscope.attention(model.eval(), {"input_ids": IDS})


def test_select_keeps_one_layer() -> None:
    att = hookscope.attention(_model("bloom"), {"input_ids": IDS}, select="transformer.h.1")
    assert att.layers == ["transformer.h.1.self_attention"]


def test_falcon_under_sdpa_is_refused_with_the_fix() -> None:
    model = _model("falcon", "sdpa")
    with pytest.raises(CaptureError, match="runs sdpa; load it with attn_implementation='eager'"):
        hookscope.attention(model, {"input_ids": IDS})


def test_a_caller_asking_for_weights_still_gets_them_and_hooks_are_gone() -> None:
    model = _model("deberta_v2")
    own = own_attention_modules(model)
    seen: list[torch.Tensor] = []
    with OwnAttention(model, own, lambda module, probs: seen.append(probs)), torch.no_grad():
        asked = model(input_ids=IDS, attention_mask=MASK, output_attentions=True).attentions
    assert len(seen) == 2 and all(torch.equal(a, b) for a, b in zip(seen, asked, strict=True))
    for _, module in own:
        assert not module._forward_hooks and not module._forward_pre_hooks


def test_hooks_are_gone_when_the_forward_raises() -> None:
    model = _model("gpt_neo")
    own = own_attention_modules(model)
    with pytest.raises(IndexError), OwnAttention(model, own, lambda module, probs: None):
        model(input_ids=torch.tensor([[1, 99]]))  # 99 is past the vocabulary
    for _, module in own:
        assert not module._forward_hooks and not module._forward_pre_hooks


def test_models_on_the_attention_interface_have_no_own_modules() -> None:
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=10)
    assert own_attention_modules(transformers.GPT2Model(config)) == []
