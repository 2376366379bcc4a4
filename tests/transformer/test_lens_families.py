"""logit_lens's default unembed and norm beyond GPT-2: small random Llama and Qwen2 (RMSNorm at
``model.norm``, ``lm_head``), the last layer against the model's logits, an earlier one by hand."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import hookscope

transformers = pytest.importorskip("transformers")
SMALL = {
    "vocab_size": 40,
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 32,
    "tie_word_embeddings": False,
}


def _model(family: str) -> Any:
    if family == "llama":
        cls, config = transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL)
    else:
        cls, config = transformers.Qwen2ForCausalLM, transformers.Qwen2Config(**SMALL)
    torch.manual_seed(0)
    return cls(config).double().eval()


def _ids() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randint(0, 40, (2, 6))


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_the_last_layer_is_the_models_logits_without_unembed_or_norm(family: str) -> None:
    model, ids = _model(family), _ids()
    lens = hookscope.logit_lens(model, ids, top_k=4)
    assert lens.layers == ["model.layers.0", "model.layers.1"]
    with torch.no_grad():
        top = torch.softmax(model(ids).logits, dim=-1).topk(4, dim=-1)
    assert torch.equal(lens.ids[-1], top.indices)
    torch.testing.assert_close(lens.probs[-1], top.values, rtol=0, atol=1e-14)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_an_earlier_layer_is_rms_norm_then_lm_head_by_hand(family: str) -> None:
    model, ids = _model(family), _ids()
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states[1]  # after layer 0, before the final norm
        norm = model.model.norm
        normed = hidden / torch.sqrt(hidden.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon) * norm.weight
        top = torch.softmax(normed @ model.lm_head.weight.T, dim=-1).topk(3, dim=-1)
    lens = hookscope.logit_lens(model, ids, top_k=3)
    assert torch.equal(lens.ids[0], top.indices)
    torch.testing.assert_close(lens.probs[0], top.values, rtol=1e-6, atol=1e-8)  # their RMSNorm works in float32
