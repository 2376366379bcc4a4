"""The engines that need a process of their own, run as ``python -m tests.serving.engines WHICH FOLDER``.

``compiled``: ``enforce_eager=False`` (torch.compile with the eager backend: Dynamo's graph, no
Inductor build), where no module hook fires: the capture must raise ``ServingError``.
``readme``: the ``python vllm`` blocks of docs/guide/serving.md, run in the folder given, what they printed handed back.
``multiprocess``: the default engine, its worker in another process (``VLLM_ENABLE_V1_MULTIPROCESSING=1``,
``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` so hookscope's worker functions travel by module and name).
``killed``: once the file ``STORE.go`` exists, captures ``KILLED`` to the store ``STORE`` (``python -m
tests.serving.engines killed FOLDER STORE``) one request at a time, and then waits inside the block: the
test kills it with SIGKILL once some requests are on disk (tests/serving/test_store.py).
``parallel``: ``tensor_parallel_size=2`` (two CPU worker processes): ``parallel_run`` captures, edits and stores.
The line ``hookscope-result {...}`` holds the JSON object the test reads.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import warnings
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "serving.md"

PROMPTS = ([1, 5, 6, 7, 8], [1, 9, 10])
KILLED = [[1, *range(4 + k, 4 + k + 2 + k % 5)] for k in range(30)]  # 30 distinct prompts of 3 to 7 tokens
KILLED_SITES = ["model.layers.0", "model.layers.1"]
KILLED_TOKENS = 4  # new tokens per request


def killed(folder: str, out: str) -> dict[str, object]:
    """Capture ``KILLED`` to ``out``, a request at a time (``flush_every`` small), then wait to be killed."""
    import time

    log = os.open(f"{out}.log", os.O_WRONLY | os.O_CREAT)  # vLLM's log: no pipe to fill, since none reads it
    os.dup2(log, 1)
    os.dup2(log, 2)
    from vllm import LLM, SamplingParams

    import hookscope

    llm = LLM(model=folder, enforce_eager=True, dtype="float32", max_model_len=64, seed=0,
              kv_cache_memory_bytes=64 << 20)  # fmt: skip
    params = SamplingParams(max_tokens=KILLED_TOKENS, temperature=0, ignore_eos=True)
    while not os.path.exists(f"{out}.go"):
        time.sleep(0.05)
    with hookscope.capture_llm(llm, KILLED_SITES, out=out, flush_every=0.05):
        for prompt in KILLED:
            llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
            time.sleep(0.05)
        time.sleep(600)  # the test kills it before this ends: the store is never finished
    return {}


def readme(folder: str) -> dict[str, object]:
    """Run docs/guide/serving.md's vLLM examples in ``folder``, in order, in one namespace; what they printed,
    line by line."""
    blocks = re.findall(r"```python vllm\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    os.chdir(folder)
    printed = io.StringIO()
    namespace = {"__name__": "__main__"}
    with contextlib.redirect_stdout(printed):
        for block in blocks:
            exec(compile(block, str(PAGE), "exec"), namespace)
    return {"printed": printed.getvalue().splitlines()}


def main(which: str, folder: str, *more: str) -> dict[str, object]:
    if which == "readme":
        return readme(folder)
    if which == "killed":
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        warnings.simplefilter("ignore")
        return killed(folder, *more)
    if which == "parallel":
        from .parallel import parallel_run

        return parallel_run(folder)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if which == "multiprocess" else "0"
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    warnings.simplefilter("ignore")
    from vllm import LLM, SamplingParams

    import hookscope

    options = {"dtype": "float32", "max_model_len": 64, "seed": 0, "kv_cache_memory_bytes": 64 << 20}
    if which == "compiled":
        options |= {"enforce_eager": False, "compilation_config": {"backend": "eager"}}
    else:
        options |= {"enforce_eager": True}
    llm = LLM(model=folder, **options)
    params = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)
    prompts = [{"prompt_token_ids": list(p)} for p in PROMPTS]
    try:
        with hookscope.capture_llm(llm, ["model.layers.0", "model.layers.1"]) as cap:
            outputs = llm.generate(prompts, params, use_tqdm=False)
    except hookscope.ServingError as err:
        return {"error": str(err)}
    found: dict[str, object] = {"tokens": {o.request_id: list(o.outputs[0].token_ids) for o in outputs}}
    found["residual"] = {r: cap.sequence(r, "model.layers.1").tolist() for r in cap}
    found["calls"] = {r: len(cap[r]["model.layers.0"].calls) for r in cap}
    return found


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # vLLM's own start-up warnings (deprecated torch names)
    print("hookscope-result", json.dumps(main(*sys.argv[1:])), flush=True)
