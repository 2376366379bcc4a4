"""What ``hookscope.watch`` costs an FSDP2 training step on two ranks, as ratios to a plain step in the same processes.

    .venv/bin/torchrun --standalone --nproc-per-node 2 benchmarks/ranks.py            # MLP 4 x 1024, batch 64
    .venv/bin/torchrun --standalone --nproc-per-node 2 benchmarks/ranks.py --smoke    # tiny, 3 rounds

One *run* is one training step of a ``fully_shard`` MLP (gloo, CPU): forward, mean squared output,
zero_grad, backward, optimizer step. The runs are interleaved in the same order on both ranks
(each run holds collectives, so the order must agree):

* ``bare``: the plain step.
* ``watch, step not logged``: inside ``watch(every=10**9)`` past its first step.
* ``watch, logged step``: inside ``watch(every=1)``: every step logged, every site's sums
  gathered from both ranks in one ``all_gather`` (``hookscope.train.rank_sums``).
* ``the gather alone``: that one ``all_gather`` of a logged step's table, timed by itself.

Targets (issue 24): the gather adds at most 2% to a logged step; steps not logged stay at 1.00x.
Rank 0 prints the Markdown table, then one ``ROW {json}`` line per row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import hookscope
from hookscope.train.collect import SLOTS
from hookscope.train.rank_sums import Ranks


def build(width: int, depth: int) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def stepper(model: nn.Module, x: torch.Tensor, every: int | None) -> Callable[[], Any]:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    if every is not None:
        hookscope.watch(model, opt, every=every).__enter__()  # left open: the process ends with the benchmark
        step()  # step 0 is logged: past it, every=10**9 sits between logged steps for good
    return step


def gather_alone(sites: int) -> Callable[[], Any]:
    ranks, table = Ranks.current(), torch.rand(sites, len(SLOTS), dtype=torch.float64)
    return lambda: [t.tolist() for t in ranks.gather(table)]


def timed(runs: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    """Seconds per run, interleaved in the same order on every rank, after one warm-up round."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds + 1):
        for name, run in runs.items():
            dist.barrier()
            start = time.perf_counter()
            run()
            if r:
                times[name].append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="a tiny MLP, 3 rounds: shows that it runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.width, args.depth, args.batch, args.rounds = 32, 2, 8, 3
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    x = torch.randn(args.batch, args.width, generator=torch.Generator().manual_seed(dist.get_rank()))
    runs = {
        "bare": stepper(build(args.width, args.depth), x, None),
        "watch, step not logged": stepper(build(args.width, args.depth), x, 10**9),
        "watch, logged step": stepper(build(args.width, args.depth), x, 1),
        "the gather alone": gather_alone(2 * args.depth + 1),
    }
    times = timed(runs, args.rounds)
    bare = statistics.median(times["bare"])
    if dist.get_rank() == 0:
        title = f"FSDP2 MLP {args.depth} x {args.width}, batch {args.batch} a rank, 2 ranks (gloo)"
        print(f"| {title} | ms (median) | ratio to bare | of a logged step |\n|---|---:|---:|---:|")
        logged = statistics.median(times["watch, logged step"])
        for name, seconds in times.items():
            ms = statistics.median(seconds) * 1e3
            share = f"{ms / (logged * 1e3):.2%}" if name == "the gather alone" else ""
            print(f"| {name} | {ms:.2f} | {ms / (bare * 1e3):.3f}x | {share} |")
        for name, seconds in times.items():
            ratio = statistics.median(seconds) / bare
            print("ROW " + json.dumps({"tool": name, "ms": statistics.median(seconds) * 1e3, "ratio": ratio}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
