"""A vLLM capture's store: killed with SIGKILL mid-run and opened, resumed with only the missing prompts
written, and read token by token by ``StoreDataset``, each against a clean in-memory capture of the same
prompts (greedy: the same tokens)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from .engines import KILLED, KILLED_SITES, KILLED_TOKENS
from .tiny import needs_vllm

vllm = needs_vllm()

import torch  # noqa: E402

import hookscope  # noqa: E402
from hookscope.serving.engine import prompt_ids  # noqa: E402
from hookscope.serving.sink import prompt_digest  # noqa: E402
from hookscope.store.format import done_batches  # noqa: E402

GREEDY = {"max_tokens": KILLED_TOKENS, "temperature": 0, "ignore_eos": True}


def tokens_of(prompts: Sequence[Sequence[int]]) -> list[dict[str, list[int]]]:
    return [{"prompt_token_ids": list(p)} for p in prompts]


def clean(llm: Any, prompts: Sequence[Sequence[int]]) -> tuple[list[str], Any]:
    """The request ids of ``prompts``, in order, and their in-memory capture."""
    with hookscope.capture_llm(llm, KILLED_SITES) as cap:
        outputs = llm.generate(tokens_of(prompts), vllm.SamplingParams(**GREEDY), use_tqdm=False)
    return [o.request_id for o in outputs], cap


def joined(run: Any, batch: int, site: str) -> torch.Tensor:
    return torch.cat([call.tensors["output"]["residual"] for call in run.batch(batch)[site].calls])


@pytest.fixture(scope="module")
def killed(engines: dict[str, subprocess.Popen[str]]) -> tuple[Path, int]:
    """The killed engine's store, once at least 3 requests are on disk (their shards, not a sleep): SIGKILL."""
    process = engines["killed"]
    out = Path(process.args[-1])  # type: ignore[index]
    Path(f"{out}.go").touch()
    deadline = time.monotonic() + 300
    while not out.is_dir() or len(done_batches(out)) < 3:
        assert process.poll() is None, Path(f"{out}.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the killed engine wrote no 3 requests in 300 s"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.communicate()  # reaped, its pipes closed
    return out, len(done_batches(out))


def test_a_killed_capture_opens_with_every_request_finished_before_it(llm: Any, killed: tuple[Path, int]) -> None:
    out, n = killed
    run = hookscope.load(out)
    assert not run.complete and "interrupted" in repr(run)  # unfinished, as a killed extract
    assert run.batches == list(range(n)) and n < len(KILLED)  # whole requests, the first n, nothing after a gap
    rows = run.manifest["batches"]
    assert [b["request"] for b in rows] == [str(i) for i in range(n)]  # request i of that engine: prompt i
    ids, cap = clean(llm, KILLED[:n])
    for i, (row, prompt) in enumerate(zip(rows, KILLED, strict=False)):
        assert row["prompt_sha256"] == prompt_digest(prompt) and row["prompt"] == len(prompt)
        assert row["calls"] == dict.fromkeys(KILLED_SITES, KILLED_TOKENS)
        assert run.batch(i)["model.layers.0"].calls[0].tensors["output"]["residual"].shape[0] == len(prompt)
        for site in KILLED_SITES:
            torch.testing.assert_close(joined(run, i, site), cap.sequence(ids[i], site), atol=1e-5, rtol=0)


def test_resume_writes_only_the_prompts_the_store_lacks(llm: Any, killed: tuple[Path, int]) -> None:
    out, n = killed
    refused = pytest.raises(hookscope.OutputExistsError, match="resume=True to continue it")
    with refused, hookscope.capture_llm(llm, KILLED_SITES, out=out):
        pass
    cap = hookscope.capture_llm(llm, KILLED_SITES, out=out, resume=True)
    prompts = tokens_of(KILLED)
    assert cap.pending(prompts) == prompts[n:]  # known before generating
    with cap, hookscope.capture_llm(llm, KILLED_SITES) as kept:
        outputs = llm.generate(prompts[n - 1 :], vllm.SamplingParams(**GREEDY), use_tqdm=False)
    assert cap.skipped == [outputs[0].request_id]  # generated again, written once
    assert sorted(cap.batches.values()) == list(range(n, len(KILLED)))  # numbering goes on
    run = cap.store()
    assert run.complete and run.batches == list(range(len(KILLED)))
    assert [b["prompt_sha256"] for b in run.manifest["batches"]] == [prompt_digest(p) for p in KILLED]
    assert cap.pending(prompts) == []
    for request, batch in cap.batches.items():
        torch.testing.assert_close(joined(run, batch, "model.layers.1"), kept.sequence(request, "model.layers.1"))


def test_pending_tokenizes_text_as_the_engine_does(llm: Any, tmp_path: Path) -> None:
    text = ["w5 w6 w7", "w9 w10 w11 w12"]
    with hookscope.capture_llm(llm, "model.layers.0", out=tmp_path / "s") as cap:
        (output,) = llm.generate(text[:1], vllm.SamplingParams(**GREEDY), use_tqdm=False)
    fed = cap.tokens(output.request_id)[: len(output.prompt_token_ids)].tolist()
    assert fed == list(output.prompt_token_ids) == prompt_ids(llm, text[0])  # what the engine fed
    assert cap.pending(text) == text[1:]
    assert cap.pending([{"prompt": text[0]}, {"prompt_token_ids": fed}, fed]) == []


def test_store_dataset_reads_each_request_token_by_token(llm: Any, tmp_path: Path) -> None:
    """Prompts of 3 to 7 tokens, 1 to 3 new tokens: every token once, each request's in order."""
    params = [vllm.SamplingParams(**{**GREEDY, "max_tokens": 1 + k % 3}) for k in range(6)]
    with hookscope.capture_llm(llm, KILLED_SITES, out=tmp_path / "s") as stored, \
         hookscope.capture_llm(llm, KILLED_SITES) as kept:  # fmt: skip
        llm.generate(tokens_of(KILLED[:6]), params, use_tqdm=False)
    order = sorted(stored.batches, key=stored.batches.__getitem__)
    for site in KILLED_SITES:
        expected = torch.cat([kept.sequence(request, site) for request in order])
        data = hookscope.StoreDataset(tmp_path / "s", site)
        assert len(data) == sum(len(p) + k % 3 for k, p in enumerate(KILLED[:6]))
        torch.testing.assert_close(data[torch.arange(len(data))], expected, atol=0, rtol=0)
