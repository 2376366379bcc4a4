"""The engines of their own process: a compiled worker raises the dead-hook error; the multiprocess
engine captures what the in-process one does; parallel engines are refused by name."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

import pytest

from .tiny import PROMPTS, needs_vllm, result

vllm = needs_vllm()

import torch  # noqa: E402

import hookscope  # noqa: E402


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


def test_tensor_parallel_is_refused_naming_the_limit() -> None:
    parallel = SimpleNamespace(tensor_parallel_size=2, pipeline_parallel_size=1)
    engine = SimpleNamespace(vllm_config=SimpleNamespace(parallel_config=parallel))
    fake = SimpleNamespace(llm_engine=engine, collective_rpc=None)
    refused = pytest.raises(hookscope.ServingError, match=r"tensor_parallel_size=2.*one whole model per worker")
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
