"""A small GPT on the CPU, every block's output: TransformerLens ``HookedTransformer`` and HF GPT-2.

Both from a random config (4 layers, d_model 128, 4 heads, vocabulary 5,000), batch 8 of 64
tokens, under no_grad. hookscope captures the block modules (``blocks.N`` /
``transformer.h.N``); TransformerLens caches ``blocks.N.hook_resid_post``, the same tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

import tools
from harness import Case, Run

LAYERS, WIDTH, HEADS, VOCAB, CONTEXT = 4, 128, 4, 5000, 64
ROUNDS = 20


def tokens() -> Tensor:
    return torch.randint(0, VOCAB, (8, CONTEXT), generator=torch.Generator().manual_seed(3))


def hooked_transformer() -> nn.Module:
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    torch.manual_seed(0)
    config = HookedTransformerConfig(
        n_layers=LAYERS,
        d_model=WIDTH,
        n_heads=HEADS,
        d_head=WIDTH // HEADS,
        d_mlp=4 * WIDTH,
        d_vocab=VOCAB,
        n_ctx=CONTEXT,
        act_fn="gelu",
        normalization_type="LN",
    )
    return HookedTransformer(config).eval()


def hf_gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=LAYERS, n_embd=WIDTH, n_head=HEADS, vocab_size=VOCAB, n_positions=CONTEXT)
    return GPT2LMHeadModel(config).eval()


def transformer_lens_case() -> Case:
    model, x = hooked_transformer(), tokens()
    blocks = [f"blocks.{i}" for i in range(LAYERS)]

    def run_with_cache() -> Run:
        wanted = {f"{b}.hook_resid_post" for b in blocks}
        return lambda: model.run_with_cache(x, names_filter=lambda name: name in wanted)[1]

    factories: dict[str, Callable[[], Run]] = {
        "hookscope": lambda: _no_grad(tools.hookscope_forward(model, blocks), x),
        "hand-written clone hooks": lambda: _no_grad(tools.hand_forward(model, blocks), x),
        "TransformerLens run_with_cache (no copy)": run_with_cache,
        "nnsight (.clone().save())": lambda: _no_grad(tools.nnsight_forward(model, blocks), x),
    }
    return Case("HookedTransformer 4 blocks, b8 x 64 tokens", _no_grad(model, x), factories, ROUNDS, tools.unpack)


def gpt2_case() -> Case:
    model, x = hf_gpt2(), tokens()
    blocks = [f"transformer.h.{i}" for i in range(LAYERS)]
    factories: dict[str, Callable[[], Run]] = {
        "hookscope": lambda: _no_grad(tools.hookscope_forward(model, blocks), x),
        "hand-written clone hooks": lambda: _no_grad(tools.hand_forward(model, blocks), x),
        "nnsight (.clone().save())": lambda: _no_grad(tools.nnsight_block_outputs(model, blocks), x),
    }
    return Case("HF GPT-2 4 blocks, b8 x 64 tokens", _no_grad(model, x), factories, ROUNDS, tools.unpack)


def _no_grad(run: Callable[[Tensor], Any], x: Tensor) -> Run:
    def call() -> Any:
        with torch.no_grad():
            return run(x)

    return call
