"""The GPU benchmark's training and dataset cases (``benchmarks/gpu.py`` runs them): ``watch``
statistics computed on the device, and ``extract`` throughput against bare inference.

* ``watch``: one SGD training step of ResNet-18 at batch 32, 224x224: bare; inside
  ``watch(every=10**9)`` past its first step (a step it does not log); inside ``watch(every=1)``
  (every step logged, the default selection). Besides the time, the host syncs of one logged step
  are counted with ``torch.cuda.set_sync_debug_mode("warn")`` (each synchronising call warns):
  the statistics stay on the device and come to the host once per logged step, so the count is a
  few, not one per module.
* ``extract``: ResNet-18 at batch 64, 224x224, 12 batches held in host memory (as a DataLoader
  hands them over): a bare loop (``model(x.to(device))`` under no_grad), ``extract`` of the eight
  residual blocks' outputs to a store on local disk, and the same with ``reducers.spatial_mean()``.
  Images per second, and the ratio to the bare loop.

``--device cpu`` runs both on the CPU at a small size: it checks the script, not the GPU
(``tests/test_bench_smoke.py`` runs it that way).
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

import harness
import hookscope
from hookscope import reducers

BLOCKS = "re:layer\\d\\.\\d"  # the eight residual blocks


def synchronized(run: Callable[[], Any], device: str) -> harness.Run:
    def call() -> Any:
        out = run()
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    return call


def watch_steps(device: str, rounds: int, *, batch: int = 32, side: int = 224) -> list[harness.Row]:
    """A training step bare, inside a watch between its logged steps, and a logged step."""

    def trainer() -> tuple[nn.Module, torch.optim.Optimizer, Callable[[], Any]]:
        torch.manual_seed(0)
        model = torchvision.models.resnet18().to(device).train()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        x = torch.randn(batch, 3, side, side, device=device)
        y = torch.randint(0, 1000, (batch,), device=device)

        def step() -> None:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

        return model, opt, step

    opened: list[Any] = []

    def inside(every: int) -> harness.Run:
        model, opt, step = trainer()
        opened.append(hookscope.watch(model, opt, every=every).__enter__())  # open for the whole measurement
        step()  # step 0 is logged; with every=10**9 the next ones are not
        return synchronized(step, device)

    _, _, bare = trainer()
    try:
        logged = inside(1)
        rows = harness.measure(
            f"{device} ResNet-18 train step b{batch} {side}px",
            synchronized(bare, device),
            {"watch, step not logged": inside(10**9), "watch(every=1), logged step": logged},
            rounds=rounds,
            memory=False,
        )
        if device == "cuda":
            rows[-1].note = f"{host_syncs(logged)} host syncs per logged step (bare step: {host_syncs(bare)})"
    finally:
        for w in opened:
            w.__exit__(None, None, None)
    return rows


def host_syncs(run: Callable[[], Any]) -> int:
    """How many times one run makes the host wait for the GPU (each synchronising call warns)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def extract_throughput(
    device: str, rounds: int, *, batch: int = 64, side: int = 224, count: int = 12
) -> list[harness.Row]:
    """Images per second of a bare inference loop and of ``extract`` over the same batches."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18().to(device).eval()
    data = [torch.randn(batch, 3, side, side) for _ in range(count)]
    folder = tempfile.mkdtemp(prefix="gpu-extract-")

    def bare() -> None:
        with torch.no_grad():
            for x in data:
                model(x.to(device))

    def extracting(**options: Any) -> harness.Run:
        def run() -> None:
            hookscope.extract(model, data, out=f"{folder}/run.hookscope", select=BLOCKS, force=True, progress=False,
                              **options)  # fmt: skip

        return synchronized(run, device)

    try:
        rows = harness.measure(
            f"{device} extract, ResNet-18 b{batch} {side}px x {count} batches",
            synchronized(bare, device),
            {
                "extract, 8 blocks' outputs": extracting(),
                "extract, spatial_mean": extracting(reduce=reducers.spatial_mean()),
            },
            rounds=rounds,
            memory=False,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for row in rows:
        row.note = f"{batch * count / (row.ms / 1e3):,.0f} images/s"
    return rows
