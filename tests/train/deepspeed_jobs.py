"""DeepSpeed ZeRO runs the tests launch (CPU: ``DS_ACCELERATOR=cpu``, gloo), watched every step.

``python -m tests.train.deepspeed_jobs OUT`` under ``torchrun --nproc-per-node 2``: the MLP of ``ranks_jobs``
trained by a DeepSpeed engine at ZeRO stages 1 and 2, each rank on its half of the batch, with two
parameter groups (DeepSpeed steps its torch optimizer once per group). Stage 1 is watched as
``watch(model_engine.module, opt)``, stage 2 as ``watch(model_engine, out=OUT/zero2.hookscope)``. Each rank writes
OUT/zero<stage>-rank<r>.json: the merged rows, the steps counted, ``history("module.0")`` beside
``history("0")``, and DeepSpeed's own norm of layer 0's full gradient after the last backward
(``safe_get_full_grad``); then OUT/refused-rank<r>.json: what watch says of a ZeRO-3 engine and of a
bf16 ZeRO-1 one (DeepSpeed's ``BF16_Optimizer``); then OUT/skipped-rank<r>.json: bf16 ZeRO-2 engines (its
``DeepSpeedZeroOptimizer`` skips the step of a non-finite gradient; fp16 does not run on DeepSpeed's CPU
accelerator) whose second step's loss is multiplied by 3e38, so that its gradients overflow, watched with
the default watch (the engine's own loss scale), and an engine that never runs that step.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is imported: no CUDA here

import deepspeed
import deepspeed.ops
import torch
import torch.distributed as dist
from deepspeed.utils import safe_get_full_grad

import hookscope
from hookscope.errors import OptionError
from tests.train.ranks_jobs import BATCH, STEPS, batch, mlp

LR = {"weight": 0.1, "bias": 0.05}  # two parameter groups


def groups(model: torch.nn.Module) -> list[dict[str, Any]]:
    """The parameters in two groups, weights and biases, each with its learning rate."""
    return [
        {"params": [p for n, p in model.named_parameters() if n.endswith(kind)], "lr": lr} for kind, lr in LR.items()
    ]


def engine(stage: int, **config: Any) -> tuple[Any, Any]:
    model = mlp()
    options = {"train_micro_batch_size_per_gpu": BATCH // dist.get_world_size(), "steps_per_print": 10**9,
               "zero_optimization": {"stage": stage}, "zero_allow_untested_optimizer": True, **config}  # fmt: skip
    made, opt, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(groups(model)), config=options)
    return made, opt


def run(stage: int, out: Path) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    model_engine, opt = engine(stage)
    half = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    if stage == 1:
        w = hookscope.watch(model_engine.module, opt, every=1)
    else:  # rank 0 writes the store
        w = hookscope.watch(model_engine, every=1, out=out / "zero2.hookscope")
    with w:
        for step in range(STEPS):
            loss = model_engine(batch(step)[half]).square().mean()
            model_engine.backward(loss)
            full = [safe_get_full_grad(p) for p in model_engine.module[0].parameters()]  # an all-reduce each
            model_engine.step()
    got = {
        "rows": {name: h.rows.tolist() for name, h in w.histories().items()},
        "steps": w.steps,
        "prefixed": w.history("module.0").rows.tolist(),
        "grad": math.sqrt(sum(float(g.double().square().sum()) for g in full)),
    }
    (out / f"zero{stage}-rank{rank}.json").write_text(json.dumps(got))


def refused(out: Path) -> None:
    said = {}
    for case, (stage, config) in {
        "zero3": (3, {}),
        "bf16": (1, {"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"}}),  # BF16_Optimizer
    }.items():
        model_engine, _ = engine(stage, **config)
        try:
            hookscope.watch(model_engine)
            said[case] = "accepted"
        except OptionError as err:
            said[case] = str(err)
    (out / f"refused-rank{dist.get_rank()}.json").write_text(json.dumps(said))


BF16 = {"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"}}  # ZeRO-2: DeepSpeedZeroOptimizer
OVERFLOW = 1  # the step whose gradient overflows


def overflowed(*, skip: bool = False) -> dict[str, Any]:
    """STEPS + 1 steps of a bf16 ZeRO-2 engine, step OVERFLOW overflowing (``skip``: never run), watched every
    step, the engine's loss scale read by default."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model_engine, _ = engine(2, **BF16)
    half = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    w = hookscope.watch(model_engine, every=1)  # no scaler=: the engine's own loss scale is read
    with w:
        for step in (s for s in range(STEPS + 1) if not (skip and s == OVERFLOW)):
            loss = model_engine(batch(step)[half].to(torch.bfloat16)).float().square().mean()
            model_engine.backward(loss * 3e38 if step == OVERFLOW else loss)
            model_engine.step()
    rows = {name: h.rows.tolist() for name, h in w.histories().items()}
    return {"rows": rows, "steps": w.steps, "skipped": w.skipped, "engine_skipped": model_engine.skipped_steps}


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # no C++ build: gloo does the collectives
    deepspeed.init_distributed("gloo")
    try:
        for stage in (1, 2):
            run(stage, out)
            dist.barrier()
        refused(out)
        cases = {}
        for case, skip in (("scaler", False), ("never", True)):
            cases[case] = overflowed(skip=skip)
            dist.barrier()
        (out / f"skipped-rank{dist.get_rank()}.json").write_text(json.dumps(cases))
    finally:
        deepspeed.comm.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
