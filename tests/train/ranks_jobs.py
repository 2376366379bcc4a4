"""Training runs that the distributed tests launch under ``torchrun --nproc-per-node 2`` (gloo, CPU).

``python -m tests.train.ranks_jobs watch OUT``  the same 3-layer MLP under DDP, FSDP2, 2x1 HSDP and tensor
                                                 parallelism, watched every step; each rank writes
                                                 OUT/<setup>-rank<r>.json (its merged rows, alerts)
                                                 and DDP a store OUT/ddp.hookscope
``python -m tests.train.ranks_jobs guard OUT``  nan_guard with a NaN in rank 1's batch (DDP), in a
                                                 weight shard rank 1 holds (FSDP2), and made by rank
                                                 1's optimizer step (FSDP2); OUT/<case>-rank<r>.json
                                                 holds what each rank raised
``python -m tests.train.ranks_jobs all OUT``    both, in one launch

``reference()`` is the same run in one process, on the whole batch, for the tests to compare with.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

import hookscope
from hookscope.errors import CaptureWarning, NonFiniteError

STEPS, BATCH, SETUPS, CASES = 3, 8, ("ddp", "fsdp", "hsdp", "tp"), ("batch", "shard", "step")


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))


def batch(step: int) -> Tensor:
    return torch.randn(BATCH, 6, generator=torch.Generator().manual_seed(100 + step))


def train(model: nn.Module, rows: Callable[[Tensor], Tensor], **options: Any) -> hookscope.Watch:
    """STEPS of SGD on the mean squared output of this rank's rows, watched every step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookscope.watch(model, opt, every=1, **options) as w:
        for step in range(STEPS):
            loss = model(rows(batch(step))).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return w


def reference() -> dict[str, list[list[float]]]:
    """The merged rows a watch of one process gives on the whole batch."""
    w = train(mlp(), lambda x: x)
    return {name: h.rows.tolist() for name, h in w.histories().items()}


def parallel(setup: str, out: Path) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh, rank = init_device_mesh("cpu", (2,)), dist.get_rank()
    model: nn.Module = mlp()
    half = slice(rank * BATCH // 2, (rank + 1) * BATCH // 2)
    rows: Callable[[Tensor], Tensor] = lambda x: x[half]  # noqa: E731
    options: dict[str, Any] = {}
    if setup == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
        options = {"out": out / "ddp.hookscope"}
    elif setup in ("fsdp", "hsdp"):  # HSDP: replicated over a mesh dim of 2, sharded over one of 1
        if setup == "hsdp":
            mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("replicate", "shard"))
        for layer in model[::2]:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:  # tensor parallel: every rank the whole batch, layer 0 cut by columns, layer 2 by rows
        parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        rows = lambda x: x  # noqa: E731
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w = train(model, rows, **options)
    named = [str(c.message) for c in caught if issubclass(c.category, CaptureWarning)]
    histories = {name.removeprefix("module."): h.rows.tolist() for name, h in w.histories().items()}
    alerts = [str(a) for a in w.alerts]
    (out / f"{setup}-rank{rank}.json").write_text(json.dumps({"rows": histories, "alerts": alerts, "warned": named}))


def captured(out: Path) -> None:
    """A capture of a tensor-parallel model (its warning) and of FSDP2's gradients, saved by each rank."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh, rank = init_device_mesh("cpu", (2,)), dist.get_rank()
    tp = parallelize_module(mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with hookscope.capture(tp, ["0", "2"]) as cap:
            tp(batch(0))
        sharded = mlp()
        fully_shard(sharded, mesh=mesh)
        with hookscope.capture(sharded, "0", kinds=("output", "param_grad")) as grads:
            sharded(batch(0)[rank * 4 : rank * 4 + 4]).square().mean().backward()
        hookscope.save(grads, out / f"grads-rank{rank}.hookscope")
    notes = [str(c.message) for c in caught if issubclass(c.category, hookscope.HookscopeWarning)]
    shapes = {"0": list(cap["0"].output.shape), "2": list(cap["2"].output.shape)}
    (out / f"capture-rank{rank}.json").write_text(json.dumps({"warned": notes, "shapes": shapes}))


def guarded(case: str, out: Path) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh, rank = init_device_mesh("cpu", (2,)), dist.get_rank()
    model: nn.Module = mlp()
    if case == "batch":
        model = nn.parallel.DistributedDataParallel(model)
    else:
        for layer in model[::2]:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=1.0 if case == "step" else 0.1)
    raised: dict[str, Any] = {"step": None}
    try:
        with hookscope.nan_guard(model, opt):
            for step in range(STEPS):
                x = batch(step)[rank * 4 : rank * 4 + 4]
                inner = model.module if case == "batch" else model
                if step == 1 and rank == 1:
                    poison(case, inner, x)
                loss = model(x).square().mean()
                opt.zero_grad()
                loss.backward()
                if case == "step" and step == 1 and rank == 1:
                    with torch.no_grad():  # rank 1's shard and its gradient finite, their difference not
                        inner[2].weight.to_local().fill_(3e38)
                        inner[2].weight.grad.to_local().fill_(-3e38)
                opt.step()
    except NonFiniteError as err:
        raised = {"step": err.step, "phase": err.phase, "module": err.module, "call": err.call, "key": err.key,
                  "rank": err.rank, "message": str(err)}  # fmt: skip
    (out / f"{case}-rank{rank}.json").write_text(json.dumps(raised))


def poison(case: str, model: nn.Module, x: Tensor) -> None:
    if case == "batch":
        x[0, 0] = math.nan
    elif case == "shard":
        with torch.no_grad():
            model[2].weight.to_local()[0, 0] = math.nan  # in the piece only this rank holds


def main(argv: list[str]) -> None:
    what, out = argv[0], Path(argv[1])
    dist.init_process_group("gloo")
    try:
        if what in ("watch", "all"):
            for setup in SETUPS:
                parallel(setup, out)
                dist.barrier()
        if what in ("capture", "all"):
            captured(out)
            dist.barrier()
        if what in ("guard", "all"):
            for case in CASES:
                guarded(case, out)
                dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
