"""Tiny random mixture-of-experts language models from their transformers 5 configs (fused 3-D experts).

``tiny_moe(family)`` builds a seeded Qwen3-MoE, Mixtral or gpt-oss causal LM with 4 experts, 2 per token,
16 wide, eager attention, in eval mode: seconds on a CPU.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

FAMILIES = ("qwen3_moe", "mixtral", "gpt_oss")
EXPERTS, TOP_K, HIDDEN, VOCAB = 4, 2, 16, 50


def tiny_moe(family: str, *, layers: int = 1, dtype: torch.dtype = torch.float32, seed: int = 0) -> Any:
    """A seeded tiny causal LM of ``family`` (one of ``FAMILIES``), ``layers`` decoder layers, in eval mode."""
    transformers = pytest.importorskip("transformers")
    common: dict[str, Any] = {
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "num_hidden_layers": layers, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 8, "max_position_embeddings": 32, "attn_implementation": "eager",
        "intermediate_size": 8, "num_experts_per_tok": TOP_K,
    }  # fmt: skip
    if family == "qwen3_moe":
        config = transformers.Qwen3MoeConfig(**common, moe_intermediate_size=8, num_experts=EXPERTS)
    elif family == "mixtral":
        config = transformers.MixtralConfig(**common, num_local_experts=EXPERTS)
    else:
        rope = {"rope_type": "default", "rope_theta": 10000.0}
        config = transformers.GptOssConfig(**common, num_local_experts=EXPERTS, layer_types=["full_attention"] * layers,
                                           rope_parameters=rope)  # fmt: skip
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).to(dtype).eval()


def router_name(family: str, layer: int = 0) -> str:
    """The dotted name of the router of layer ``layer``'s experts."""
    return f"model.layers.{layer}.mlp.{'router' if family == 'gpt_oss' else 'gate'}"
