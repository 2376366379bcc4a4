"""Profiles behind the missed targets in docs/benchmarks.md (hookscope's own environment is enough).

    .venv/bin/python benchmarks/profiles.py          # prints the three profiles below
    py-spy record --native -o leaves.svg -- .venv/bin/python benchmarks/profiles.py leaves   # a flame graph

1. ``leaves``: ResNet-18, batch 8, every leaf output kept: torch.profiler's operators for a bare
   run and a hookscope run (where the extra time goes), then the copy itself: cloning what is
   kept into new memory against copying it into memory that is already mapped.
2. ``percall``: cProfile of 1,000 hooked calls (hookscope ``clone=False``), the functions by own time.
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torchvision
from torch import nn

import hookscope


def _median_ms(run: Callable[[], object], rounds: int = 10) -> float:
    times = []
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def leaves() -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    x = torch.randn(8, 3, 224, 224)

    def captured() -> hookscope.Capture:
        with hookscope.capture(model) as cap, torch.no_grad():
            model(x)
        return cap

    with torch.no_grad():
        model(x)
    captured()
    activities = [torch.profiler.ProfilerActivity.CPU]
    for name, run in (("bare", lambda: model(x)), ("hookscope", captured)):
        with torch.no_grad(), torch.profiler.profile(activities=activities) as prof:
            run()
        print(f"\n## torch.profiler, ResNet-18 b8 every leaf: {name}\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8, max_name_column_width=28))
    kept = [t for record in captured().values() for call in record.calls for t in call.tensors["output"].values()]
    sources = [t.clone() for t in kept]
    targets = [torch.empty_like(t) for t in kept]
    fresh = _median_ms(lambda: [t.clone() for t in sources])
    mapped = _median_ms(lambda: [d.copy_(s) for d, s in zip(targets, sources, strict=True)])
    nbytes = sum(t.nbytes for t in kept) / 1e6
    print(f"\n## the copy itself: {len(kept)} tensors, {nbytes:.0f} MB")
    print(f"clone into new memory (what any hook that keeps a copy does): {fresh:.1f} ms")
    print(f"copy_ into memory already mapped:                               {mapped:.1f} ms")
    print(
        f"bare forward:                                                   {_median_ms(lambda: _bare(model, x)):.1f} ms"
    )


def _bare(model: nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        model(x)


def percall() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(1000)]).eval()
    x = torch.randn(1, 8)
    with hookscope.capture(model, nn.Linear, clone=False) as cap, torch.no_grad():
        model(x)
        profiler = cProfile.Profile()
        for _ in range(20):
            cap.clear()
            profiler.enable()
            model(x)
            profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    print("\n## cProfile, 20 x 1,000 hooked calls (hookscope clone=False), by own time\n")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:4000])


def main(argv: list[str]) -> int:
    chosen = argv or ["leaves", "percall"]
    for name in chosen:
        {"leaves": leaves, "percall": percall}[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
