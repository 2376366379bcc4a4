"""The engines of their own process: a compiled worker raises the dead-hook error; the multiprocess
engine captures what the in-process one does; the tensor-parallel one (2 ranks) captures, edits and
stores what one rank does; pipeline parallel is refused by name."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from .parallel import steps
from .tiny import PROMPTS, needs_vllm, result

vllm = needs_vllm()

import torch  # noqa: E402

import hookscope  # noqa: E402
from hookscope.serving.parallel import REPLICATED_TOLERANCE  # noqa: E402

from .test_engine import hf_states  # noqa: E402


@pytest.fixture(scope="module")
def ranks(llm: Any, engines: dict[str, subprocess.Popen[str]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``tests.serving.parallel.steps`` at one rank (this process's engine) and at two (its own process)."""
    return steps(llm), result(engines["parallel"])


def test_a_compiled_worker_raises_the_dead_hook_error(engines: dict[str, subprocess.Popen[str]]) -> None:
    found = result(engines["compiled"])
    assert "error" in found, found
    assert "2 selected site(s) never fired" in found["error"]
    assert "the worker is compiled (enforce_eager=False)" in found["error"]
    assert "build the LLM with enforce_eager=True" in found["error"]


def test_the_multiprocess_engine_captures_as_in_process(llm: Any, engines: dict[str, subprocess.Popen[str]]) -> None:
    params = vllm.SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)
    with hookscope.capture_llm(llm, ["model.layers.0", "model.layers.1"]) as cap:
        outputs = llm.generate([{"prompt_token_ids": list(p)} for p in PROMPTS], params, use_tqdm=False)
    here = [cap.sequence(o.request_id, "model.layers.1") for o in sorted(outputs, key=lambda o: int(o.request_id))]
    found = result(engines["multiprocess"])
    assert "error" not in found, found
    there = [torch.tensor(found["residual"][r]) for r in sorted(found["residual"], key=int)]
    assert list(found["calls"].values()) == [3, 3]  # the prefill and 2 decode steps
    for mine, theirs in zip(here, there, strict=True):
        torch.testing.assert_close(theirs, mine, atol=1e-5, rtol=0)


def test_tensor_parallel_records_are_whole_and_equal_one_rank(
    ranks: tuple[dict[str, Any], dict[str, Any]], tiny: Path
) -> None:
    """Split values (qkv_proj, gate_up_proj outputs; o_proj, down_proj inputs) gathered in the unsplit order,
    replicated ones (the decoder layers) kept once: every record equals one rank's, and HF's hidden states."""
    one, two = ranks
    assert "error" not in two, two
    assert two["tokens"] == one["tokens"]
    for mine, theirs in zip(one["records"], two["records"], strict=True):
        assert theirs.keys() == mine.keys()
        for key, value in mine.items():
            torch.testing.assert_close(torch.tensor(theirs[key]), torch.tensor(value), atol=1e-5, rtol=0, msg=key)
    for prompt, generated, theirs in zip(PROMPTS, two["tokens"], two["records"], strict=True):
        layer0, layer1, _ = hf_states(tiny, torch.tensor([*prompt, *generated[:-1]]))
        torch.testing.assert_close(torch.tensor(theirs["model.layers.0 output residual"]), layer0, atol=1e-5, rtol=0)
        torch.testing.assert_close(torch.tensor(theirs["model.layers.1 output residual"]), layer1, atol=1e-5, rtol=0)
    assert {"model.layers.1 output residual", "model.layers.0.self_attn.o_proj output out[0]"} <= set(two["replicated"])
    assert "model.layers.0.self_attn.qkv_proj output out[0]" not in two["replicated"]  # gathered, not compared
    assert 0 <= two["disagreement"] <= REPLICATED_TOLERANCE  # the first-step check ran and the copies agreed
    assert two["batches"] == [0, 1]  # rank 0 alone wrote the store: one batch per request, not two
    for mine, theirs in zip(one["stored"], two["stored"], strict=True):
        torch.testing.assert_close(torch.tensor(theirs), torch.tensor(mine), atol=1e-5, rtol=0)


def test_an_edit_at_tensor_parallel_changes_tokens_as_at_one_rank(ranks: tuple[dict[str, Any], dict[str, Any]]) -> None:
    one, two = ranks
    assert two["steered"] == one["steered"] and two["steered"] != two["tokens"]
    assert two["edited"] == one["edited"] == [[0, 1], [0, 2], [1, 1], [1, 2]]  # the 2 decode steps of each prompt
    assert "'model.layers.0.self_attn.qkv_proj': each tensor-parallel rank holds only its piece" in two["refused"]
    assert "refused" not in one  # one rank holds the whole output: the same edit runs


def test_pipeline_parallel_is_refused_naming_the_limit() -> None:
    parallel = SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=2)
    engine = SimpleNamespace(vllm_config=SimpleNamespace(parallel_config=parallel))
    fake = SimpleNamespace(llm_engine=engine, collective_rpc=None)
    refused = pytest.raises(hookscope.ServingError, match=r"pipeline_parallel_size=2: each pipeline stage holds only")
    with refused, hookscope.capture_llm(fake, "model.layers.0"):
        pass


def test_the_multiprocess_engine_needs_its_serialization_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    parallel = SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1)
    fake = SimpleNamespace(llm_engine=SimpleNamespace(vllm_config=SimpleNamespace(parallel_config=parallel)),
                           collective_rpc=None)  # fmt: skip
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    monkeypatch.delenv("VLLM_ALLOW_INSECURE_SERIALIZATION", raising=False)
    refused = pytest.raises(hookscope.ServingError, match=r"VLLM_ALLOW_INSECURE_SERIALIZATION=1 set before the LLM")
    with refused, hookscope.capture_llm(fake, "model.layers.0"):
        pass
