"""Extractions that the tests run in other processes: killed, measured, or under torchrun.

``python -m tests.jobs tensors OUT [--slow] [--resume]``  100 batches to a store, one shard each
``python -m tests.jobs memory OUT MAX_MEMORY``            a run that writes far more than the bound;
                                                           prints JSON with its resident memory
``python -m tests.jobs top OUT``                           the memory run, reduced to top_examples(9)
``python -m tests.jobs ranks OUT``                         a tensor run (DataLoader) and a statistics
                                                           run (a generator) into OUT/acts, OUT/stats
``python -m tests.jobs durable OUT LOG [--resume] [--stats]`` 40 slow batches into shards that never
                                                           fill (flushed every DURABLE_FLUSH seconds);
                                                           LOG gets "index monotonic-time" as each completes
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from hookscope.store.extract import extract


def small_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1)).eval()


def images(count: int, side: int, seed: int = 1) -> Iterator[torch.Tensor]:
    """``count`` batches of 4 random images, made on the fly (the data set is never held)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(count):
        yield torch.randn(4, 3, side, side, generator=g)


def tensors(out: str, slow: bool, resume: bool) -> None:
    def forward(model: nn.Module, batch: Any) -> Any:
        if slow:
            time.sleep(0.03)
        return model(batch)

    extract(small_net(), list(images(100, 16)), out=out, select=["0", "2"], max_memory="1MB", shard_size=1,
            progress=False, forward=forward, resume=resume)  # fmt: skip


DURABLE_FLUSH = 0.25  # seconds: the flush_every of the durable job
DURABLE_BATCHES = 40


def durable(out: str, log: str, resume: bool, stats: bool) -> None:
    def forward(model: nn.Module, batch: Any) -> Any:
        time.sleep(0.06)
        return model(batch)

    def logged(batches: Iterator[torch.Tensor]) -> Iterator[torch.Tensor]:
        with open(log, "a", encoding="ascii") as f:
            for i, batch in enumerate(batches):
                if i:  # asked for batch i: batch i - 1 is finished (handed to the writer)
                    f.write(f"{i - 1} {time.monotonic()}\n")
                    f.flush()
                yield batch

    batches = list(images(DURABLE_BATCHES, 32))
    extract(small_net(), batches if resume else logged(iter(batches)), out=out, select=["0", "2"], progress=False,
            forward=forward, resume=resume, stats_only=stats, flush_every=DURABLE_FLUSH)  # fmt: skip


def memory(out: str, max_memory: str, reduce: Any = None) -> None:
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1)).eval()
    with torch.no_grad():
        model(next(images(1, 128)))  # kernels and thread pools loaded before the baseline
    import safetensors.torch  # noqa: F401  (loaded before the baseline, like torch)

    Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the current RSS
    base = status("VmRSS")
    run = extract(model, images(40, 128), out=out, max_memory=max_memory, progress=False, reduce=reduce)
    written = sum(row.nbytes for row in run.contents())
    batch = 4 * 32 * 128 * 128 * 4
    print(json.dumps({"base": base, "peak": status("VmHWM"), "written": written, "batch": batch}))


def ranks(out: str) -> None:
    g = torch.Generator().manual_seed(2)
    data = TensorDataset(torch.randn(10, 3, 8, 8, generator=g), torch.arange(10))
    loader = DataLoader(data, batch_size=3)  # 4 batches: rank 0 takes 0 and 2, rank 1 takes 1 and 3
    extract(small_net(), loader, out=f"{out}/acts", kinds=("input", "output"), progress=False)
    extract(small_net(), images(5, 8), out=f"{out}/stats", stats_only=True, per_channel=True, progress=False)
    extract(small_net(), loader, out=f"{out}/grads", kinds=("output", "grad_output"), target=square_sum, progress=False)


def square_sum(output: torch.Tensor, batch: Any) -> torch.Tensor:
    return output.square().sum()


def status(field: str) -> int:
    """A field of /proc/self/status in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


if __name__ == "__main__":
    torch.set_num_threads(1)
    job, out, *rest = sys.argv[1:]
    if job == "tensors":
        tensors(out, slow="--slow" in rest, resume="--resume" in rest)
    elif job == "memory":
        memory(out, rest[0])
    elif job == "top":
        from hookscope.reducers import top_examples

        memory(out, "2GB", reduce=top_examples(9))
    elif job == "ranks":
        ranks(out)
    elif job == "durable":
        durable(out, rest[0], resume="--resume" in rest, stats="--stats" in rest)
