"""``extract(..., reduce=top_examples(9))`` against a plain ``extract`` of the same site, one process, interleaved.

    .venv/bin/python benchmarks/top_examples.py [--rounds 7] [--batches 20] [--site layer4] [--side 128]

ResNet-18 (random init, eval, no_grad) over batches of 16 made once and held in memory. Each
round runs both, in turn order alternating, each into a fresh store: ``extract`` of the site's
output (every value written), and the same with ``reduce=reducers.top_examples(top_k=9)`` (per unit
its 9 best activations with their row and position, and each row's peak). The ratio is the median
over rounds of *top-k time / plain time of the same round* (wall, and CPU time of the process, which
a shared machine disturbs less); the target is at most 1.15x. Also
printed: the bytes each writes, and a check that the store's top k equals a brute-force sort.
Results go to docs/benchmarks.md by hand; the numbers depend on the machine and its disk.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torchvision
from torch import nn

from hookscope import reducers
from hookscope.probes.top import TopExamples
from hookscope.store.extract import extract
from hookscope.store.reader import load

BATCH, K = 16, 9


def model() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18().eval()


def batches(count: int, side: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(BATCH, 3, side, side, generator=g) for _ in range(count)]


def run(net: nn.Module, data: list[torch.Tensor], out: Path, site: str, top: bool) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (every thread of the process) and bytes written of one extract."""
    reduce = reducers.top_examples(top_k=K) if top else None
    start, cpu = time.perf_counter(), time.process_time()
    stored = extract(net, data, out=out, select=site, max_memory="256MB", progress=False, reduce=reduce)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu, sum(row.nbytes for row in stored.contents())


def brute_force_agrees(net: nn.Module, data: list[torch.Tensor], out: Path, site: str) -> bool:
    """The store's top k values equal a sort of every activation of the site (outside the clock)."""
    top = TopExamples.read(load(out), site)
    maps = []
    module = dict(net.named_modules())[site]
    handle = module.register_forward_hook(lambda m, i, o: maps.append(o.detach().clone()))
    with torch.no_grad():
        for x in data:
            net(x)
    handle.remove()
    every = torch.cat(maps).transpose(0, 1).reshape(top.units, -1)  # (U, N * P)
    return bool(torch.allclose(top.values, every.topk(K, dim=1).values.double(), atol=1e-5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--site", default="layer4")
    parser.add_argument("--side", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(2)
    net, data = model(), batches(args.batches, args.side)
    folder = Path(tempfile.mkdtemp(prefix="hookscope-top-"))
    try:
        run(net, data[:2], folder / "warm", args.site, top=True)  # kernels, thread pools, imports
        ratios, cpu_ratios, seconds, written = [], [], {True: [], False: []}, {}
        for turn in range(args.rounds):
            this, cpu = {}, {}
            for top in (turn % 2 == 0, turn % 2 == 1):
                shutil.rmtree(folder / "s", ignore_errors=True)
                this[top], cpu[top], written[top] = run(net, data, folder / "s", args.site, top)
                seconds[top].append(this[top])
            ratios.append(this[True] / this[False])
            cpu_ratios.append(cpu[True] / cpu[False])
        shutil.rmtree(folder / "s", ignore_errors=True)
        run(net, data, folder / "s", args.site, top=True)  # outside the clock: the check
        agrees = brute_force_agrees(net, data, folder / "s", args.site)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    n = args.batches * BATCH
    print(f"ResNet-18 {args.site}, {args.batches} batches of {BATCH} at {args.side}x{args.side}, {args.rounds} rounds")
    print(f"  plain extract      median {statistics.median(seconds[False]):.3f} s, {written[False] / 2**20:.1f} MiB")
    print(f"  top_examples({K})   median {statistics.median(seconds[True]):.3f} s, {written[True] / 2**20:.2f} MiB")
    print(f"  ratio top/plain    median {statistics.median(ratios):.3f}x (range {min(ratios):.3f}-{max(ratios):.3f})"
          f", {n} images; top k equals a brute-force sort: {agrees}")  # fmt: skip
    print(f"  CPU time top/plain median {statistics.median(cpu_ratios):.3f}x "
          f"(range {min(cpu_ratios):.3f}-{max(cpu_ratios):.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
