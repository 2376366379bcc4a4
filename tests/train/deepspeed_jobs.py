"""DeepSpeed ZeRO runs the tests launch (CPU: ``DS_ACCELERATOR=cpu``, gloo), watched every step.

``python -m tests.train.deepspeed_jobs OUT`` under ``torchrun --nproc-per-node 2`` (or alone, a world of
one): the MLP of ``ranks_jobs`` trained by a DeepSpeed engine at ZeRO stages 1 and 2, each rank on its
half of the batch, with two parameter groups (DeepSpeed steps its torch optimizer once per group);
each rank writes OUT/zero<stage>-rank<r>.json: the merged rows and DeepSpeed's own full gradient of
layer 0's weight after the last backward (``safe_get_full_grad``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is imported: no CUDA here

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.utils import safe_get_full_grad

import hookscope
from tests.train.ranks_jobs import BATCH, STEPS, batch, mlp


def config(stage: int, world: int) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": BATCH // world, "steps_per_print": 10**9,
            "zero_optimization": {"stage": stage}, "zero_allow_untested_optimizer": True}  # fmt: skip


def engine(stage: int) -> Any:
    model = mlp()
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    sgd = torch.optim.SGD([{"params": weights}, {"params": biases, "lr": 0.05}], lr=0.1)
    made, _, _, _ = deepspeed.initialize(model=model, optimizer=sgd, config=config(stage, dist.get_world_size()))
    return made


def run(stage: int, out: Path) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    model_engine = engine(stage)
    half = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    with hookscope.watch(model_engine, every=1) as w:
        for step in range(STEPS):
            loss = model_engine(batch(step)[half]).square().mean()
            model_engine.backward(loss)
            full = safe_get_full_grad(model_engine.module[0].weight)  # DeepSpeed's own reading, an all-reduce
            model_engine.step()
    rows = {name: h.rows.tolist() for name, h in w.histories().items()}
    grad = float(full.double().norm())
    (out / f"zero{stage}-rank{rank}.json").write_text(json.dumps({"rows": rows, "grad": grad, "steps": w.steps}))


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    deepspeed.init_distributed("gloo")
    try:
        for stage in (1, 2):
            run(stage, out)
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
