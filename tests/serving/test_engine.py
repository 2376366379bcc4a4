"""hookscope.capture_llm inside a vLLM engine, per request, against HF transformers on the same weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .tiny import PROMPTS, needs_vllm

vllm = needs_vllm()

import torch  # noqa: E402

import hookscope  # noqa: E402

SITES = ["model.layers.0", "model.layers.1", "model.norm"]


def interleaved(llm: Any, steps: int) -> dict[str, list[int]]:
    """Request "a" alone for one step (its prefill), then "b" joins: b's prefill is packed with a's decode
    tokens in one batch. Returns each request's generated tokens."""
    params = vllm.SamplingParams(max_tokens=steps, temperature=0, ignore_eos=True)
    engine = llm.llm_engine
    engine.add_request("a", {"prompt_token_ids": list(PROMPTS[0])}, params)
    engine.step()
    engine.add_request("b", {"prompt_token_ids": list(PROMPTS[1])}, params)
    done: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = list(out.outputs[0].token_ids)
    return done


def hf_states(tiny: Path, tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """HF transformers' hidden_states of one sequence (the oracle), plus layer 1's output (before the norm)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    with hookscope.capture(model, "model.layers.1") as cap, torch.no_grad():
        states = model(tokens.long()[None], output_hidden_states=True).hidden_states
    return states[1][0], cap["model.layers.1"].output.reshape(-1, 128), states[2][0]


def test_per_request_records_equal_hf_hidden_states(llm: Any, tiny: Path) -> None:
    with hookscope.capture_llm(llm, SITES) as cap:
        generated = interleaved(llm, steps=4)
    assert sorted(cap) == ["a", "b"]
    # vLLM's CPU backend repacks every Linear weight into an empty tensor: named, never read as statistics
    assert "model.layers.0.mlp.down_proj.weight" in cap.unreadable
    assert "model.layers.0.input_layernorm.weight" not in cap.unreadable
    for request, prompt in zip("ab", PROMPTS, strict=True):
        record = cap[request]["model.layers.0"]
        assert len(record.calls) == 4  # the prefill, then 3 decode steps (the 4th token is never fed)
        assert [c.tensors["output"]["residual"].shape[0] for c in record.calls] == [len(prompt), 1, 1, 1]
        tokens = cap.tokens(request)
        assert tokens.tolist() == [*prompt, *generated[request][:-1]]
        layer0, layer1, normed = hf_states(tiny, tokens)
        torch.testing.assert_close(cap.sequence(request, "model.layers.0"), layer0, atol=1e-5, rtol=0)
        torch.testing.assert_close(cap.sequence(request, "model.layers.1"), layer1, atol=1e-5, rtol=0)
        torch.testing.assert_close(cap.sequence(request, "model.norm", key="out[0]"), normed, atol=1e-5, rtol=0)
        hidden, residual = (cap.sequence(request, "model.layers.0", key=f"out[{i}]") for i in (0, 1))
        torch.testing.assert_close(hidden + residual, layer0, atol=1e-5, rtol=0)  # the fused pair's sum


def test_the_packed_step_held_both_requests(llm: Any) -> None:
    """Step 2 packs a's decode token with b's prefill: the slices are right, not just the shapes."""
    with hookscope.capture_llm(llm, "model.layers.0", kinds=("input", "output")) as cap:
        interleaved(llm, steps=2)
    a, b = cap["a"]["model.layers.0"].calls, cap["b"]["model.layers.0"].calls
    assert a[1].tensors["input"]["args[0]"].tolist() == [5]  # a's decode: position 5
    assert b[0].tensors["input"]["args[0]"].tolist() == [0, 1, 2]  # b's prefill in the same step


def test_records_stream_to_a_store(llm: Any, tmp_path: Path) -> None:
    """Each finished request is one batch of the usual store, equal to the records kept in memory."""
    out = tmp_path / "acts.hookscope"
    with hookscope.capture_llm(llm, SITES[:2], out=out) as stored, hookscope.capture_llm(llm, SITES[:2]) as kept:
        interleaved(llm, steps=3)
    run = stored.store()
    assert sorted(stored.batches) == ["a", "b"] and len(stored) == 0  # the records went to the store
    assert sorted(run.batches) == [0, 1]
    for request in "ab":
        batch = run.batch(stored.batches[request])
        for site in SITES[:2]:
            on_disk = [call.tensors["output"]["residual"] for call in batch[site].calls]
            torch.testing.assert_close(torch.cat(on_disk), kept.sequence(request, site), atol=0, rtol=0)


def test_a_module_vllm_never_calls_is_an_error_naming_why(llm: Any) -> None:
    never = pytest.raises(hookscope.ServingError, match=r"'lm_head' \(vLLM's logits processor reads lm_head's weight")
    with never, hookscope.capture_llm(llm, ["model.layers.0", "lm_head"]):
        interleaved(llm, steps=2)
    warned = pytest.warns(hookscope.ServingWarning, match=r"1 selected site\(s\) never fired.*'lm_head'")
    with warned, hookscope.capture_llm(llm, ["model.layers.0", "lm_head"], strict=False) as cap:
        interleaved(llm, steps=2)
    assert len(cap["a"]["model.layers.0"].calls) == 2  # what did fire is kept
