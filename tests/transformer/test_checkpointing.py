"""Hugging Face ``gradient_checkpointing_enable()`` on the packaged MiniLM: a capture and an edit
give what they give on the same model without checkpointing (the oracle), for both ``use_reentrant``.

Hugging Face checkpoints each layer's ``forward`` (the layer's own hooks stay outside the
checkpoint), so the layer's submodules run twice; each is still one logical call, with its
gradient, and the edit of layer 2 reaches its recomputation (no ``CheckpointError``).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
import torch

import hookscope
from hookscope import edits

SITES = "encoder.layer.*.intermediate.dense"
EDITED = "encoder.layer.2.attention.output.dense"


def prepared(minilm: Any, reentrant: bool | None) -> Any:
    """MiniLM in training mode without dropout (so both runs compute the same), checkpointed or not."""
    for module in minilm.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    minilm.config.attention_probs_dropout_prob = 0.0
    if reentrant is not None:
        with warnings.catch_warnings():  # transformers 5 renames it activation_checkpointing_enable
            warnings.simplefilter("ignore", FutureWarning)
            minilm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    return minilm.train()


def run(model: Any, tokenizer: Any) -> tuple[hookscope.Capture, torch.Tensor, list[tuple[int, ...]]]:
    """Edit layer 2, capture every layer's intermediate Linear, backward: (capture, embedding grad, calls edited)."""
    batch = dict(tokenizer(["The cat sat on the mat."], return_tensors="pt"))
    with (
        hookscope.edit(model, {EDITED: edits.scale(0.5)}) as ed,
        hookscope.capture(model, SITES, kinds=("output", "grad_output")) as cap,
    ):
        model(**batch).last_hidden_state.pow(2).mean().backward()
    return cap, model.embeddings.word_embeddings.weight.grad, [row.calls for row in ed.report().rows]


@pytest.fixture(scope="module")
def oracle(_minilm_loaded: Any, minilm_tokenizer: Any) -> Any:
    return run(prepared(copy.deepcopy(_minilm_loaded), None), minilm_tokenizer)


@pytest.mark.parametrize("reentrant", [False, True])
def test_minilm_under_gradient_checkpointing(minilm: Any, minilm_tokenizer: Any, oracle: Any, reentrant: bool) -> None:
    model = prepared(minilm, reentrant)
    assert model.encoder.layer[0].gradient_checkpointing
    cap, grad, calls = run(model, minilm_tokenizer)
    want, want_grad, want_calls = oracle
    assert list(cap) == list(want) and len(cap) == 6
    for name in cap:
        assert len(cap[name].calls) == 1  # the recomputation is the same call
        torch.testing.assert_close(cap[name].output, want[name].output, rtol=0, atol=1e-5)
        torch.testing.assert_close(cap[name].grad_output, want[name].grad_output, rtol=0, atol=1e-7)
    torch.testing.assert_close(grad, want_grad, rtol=0, atol=1e-7)
    assert calls == want_calls == [(0,)]
