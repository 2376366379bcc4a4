"""hookscope.edit_llm inside a vLLM engine: steering that changes tokens, counted per request and call,
undone bit-exactly; a hook that raises fails its request and leaves the engine serving."""

from __future__ import annotations

from typing import Any

import pytest

from .tiny import PROMPTS, needs_vllm

vllm = needs_vllm()

import torch  # noqa: E402

import hookscope  # noqa: E402
from hookscope import edits  # noqa: E402

STEPS = 4


def generate(llm: Any) -> dict[str, list[int]]:
    """Greedy tokens of PROMPTS, by request id (ids go on counting from one generate to the next)."""
    params = vllm.SamplingParams(max_tokens=STEPS, temperature=0, ignore_eos=True)
    prompts = [{"prompt_token_ids": list(p)} for p in PROMPTS]
    return {o.request_id: list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)}


def tokens(found: dict[str, list[int]]) -> list[list[int]]:
    return [found[r] for r in sorted(found, key=int)]


def test_steering_changes_tokens_and_is_counted(llm: Any) -> None:
    baseline = generate(llm)
    direction = torch.randn(128, generator=torch.Generator().manual_seed(0)) * 4
    with hookscope.edit_llm(llm, {"model.layers.0": edits.add(direction)}) as ed:
        steered = generate(llm)
    assert tokens(steered) != tokens(baseline)
    assert tokens(generate(llm)) == tokens(baseline)  # the block is gone: the same tokens, bit for bit
    report = ed.report()
    for request, prompt in zip(sorted(steered, key=int), PROMPTS, strict=True):
        rows = [r for r in report if r.request == request]
        assert [r.call for r in rows] == list(range(STEPS))  # 1 prefill + 3 decode calls (the 4th token is never fed)
        assert [r.step for r in rows] == ["prefill"] + ["decode"] * (STEPS - 1)
        assert rows[0].changed == rows[0].elements == len(prompt) * 128
        assert all(r.key == "residual" and r.relative > 0 for r in rows)
    assert "prefill" in report.table()


def test_edits_limited_to_a_request_and_new_tokens(llm: Any) -> None:
    baseline = tokens(generate(llm))
    first = str(int(next(iter(generate(llm)))) + 2)  # the next generate's first request
    with hookscope.edit_llm(llm, {"model.layers.1": edits.scale(0.0)}, requests=[first], positions="new") as ed:
        steered = tokens(generate(llm))
    assert steered[1] == baseline[1]  # not chosen: untouched
    assert steered[0][0] == baseline[0][0]  # the first token comes from the prompt's rows: untouched
    assert steered[0] != baseline[0]
    assert {r.request for r in ed.report()} == {first}
    assert ed.report().calls(first) == list(range(1, STEPS))  # decode calls only


def test_an_edit_that_never_ran_is_an_error(llm: Any) -> None:
    never = pytest.raises(hookscope.EditError, match=r"'model.layers.1'.*never ran")
    with never, hookscope.edit_llm(llm, {"model.layers.1": edits.scale(2.0)}):
        pass  # no generate inside the block


def test_a_hook_that_raises_fails_its_request_and_the_engine_serves_on(llm: Any) -> None:
    baseline = generate(llm)

    def broken(tensor: torch.Tensor, call: int) -> torch.Tensor:
        raise ValueError("a broken steering function")

    failed = pytest.raises(hookscope.ServingError, match=r"request '\d+' failed: the edit at 'model.layers.0' "
                                                         r"raised ValueError: a broken steering function")  # fmt: skip
    with failed, hookscope.edit_llm(llm, {"model.layers.0": broken}):
        generate(llm)
    assert tokens(generate(llm)) == tokens(baseline)  # the engine serves the next request, no hook left
    assert llm.apply_model(lambda m: sum(len(x._forward_hooks) + len(x._forward_pre_hooks) for x in m.modules())) == [0]
