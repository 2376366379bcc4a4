"""What the tensor-parallel engine (``tensor_parallel_size=2``) does, run by ``tests.serving.engines parallel``
and, at one rank, by the test itself (``steps``): the same captures, edit and store on the same prompts.

vLLM's CPU workers bind their OpenMP threads to one NUMA node each by default, and refuse two ranks
on a one-node machine; ``VLLM_CPU_OMP_THREADS_BIND`` gives each rank its own CPUs instead.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

SITES = ["model.layers.0", "model.layers.1", "model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj",
         "model.layers.0.self_attn.o_proj", "model.layers.0.mlp.down_proj"]  # fmt: skip
PROMPTS = ([1, 5, 6, 7, 8], [1, 9, 10])
STEERING = 4.0  # added to layer 0's residual at the generated tokens: enough to change the greedy tokens


def bind_two_ranks() -> None:
    """Each of two ranks its own CPUs (half of those this process may use), or no binding on one CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    half = len(cpus) // 2
    bind = "nobind" if half == 0 else "|".join(",".join(map(str, part)) for part in (cpus[:half], cpus[half:]))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", bind)


def steps(llm: Any) -> dict[str, Any]:
    """Capture ``SITES`` (inputs and outputs), then edit layer 0, then stream a capture to a store."""
    import torch
    from vllm import SamplingParams

    import hookscope
    from hookscope import edits

    params = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)
    prompts = [{"prompt_token_ids": list(p)} for p in PROMPTS]
    found: dict[str, Any] = {}
    with hookscope.capture_llm(llm, SITES, kinds=("input", "output")) as cap:
        outputs = llm.generate(prompts, params, use_tqdm=False)
    order = [o.request_id for o in outputs]
    found["tokens"] = [list(o.outputs[0].token_ids) for o in outputs]
    found["disagreement"] = cap.found["disagreement"]  # rank 0's largest relative difference of a replicated value
    found["replicated"] = cap.found["replicated"]  # "site kind key" of each value checked to agree across ranks
    found["records"] = [
        {f"{site} {kind} {key}": torch.cat([c.tensors[kind][key] for c in cap[r][site].calls]).tolist()
         for site in SITES for kind in ("input", "output") for key in cap[r][site].calls[0].tensors[kind]}
        for r in order
    ]  # fmt: skip
    with hookscope.edit_llm(llm, {"model.layers.0": edits.add(torch.full((128,), STEERING))}, positions="new") as ed:
        steered = llm.generate(prompts, params, use_tqdm=False)
    found["steered"] = [list(o.outputs[0].token_ids) for o in steered]
    index = {o.request_id: i for i, o in enumerate(steered)}
    found["edited"] = sorted([index[row.request], row.call] for row in ed.report().rows)  # (prompt, call)
    try:
        with hookscope.edit_llm(llm, {"model.layers.0.self_attn.qkv_proj": edits.zero()}):
            llm.generate(prompts, params, use_tqdm=False)
    except hookscope.EditError as err:
        found["refused"] = str(err)
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "acts.hookscope")
        with hookscope.capture_llm(llm, "model.layers.1", out=out) as stored:
            again = [o.request_id for o in llm.generate(prompts, params, use_tqdm=False)]
        run = hookscope.load(out)
        held = [run.batch(stored.batches[r])["model.layers.1"].calls for r in again]
        found["stored"] = [torch.cat([c.tensors["output"]["residual"] for c in calls]).tolist() for calls in held]
        found["batches"] = sorted(run.batches)
    return found


def parallel_run(folder: str) -> dict[str, Any]:
    """``steps`` on the tiny Llama in ``folder`` at ``tensor_parallel_size=2``."""
    import warnings

    bind_two_ranks()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # the default engine: its core and two ranks, processes
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    warnings.simplefilter("ignore")
    from vllm import LLM

    from .tiny import ENGINE

    llm = LLM(model=folder, **ENGINE, tensor_parallel_size=2)
    return steps(llm)
