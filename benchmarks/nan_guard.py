"""What ``hookscope.nan_guard`` costs a training step, beside ``torch.autograd.detect_anomaly``.

    .venv/bin/python benchmarks/nan_guard.py              # EfficientNet-Lite0, batch 8, 224x224
    .venv/bin/python benchmarks/nan_guard.py --smoke      # seconds: batch 2, 64x64 (CI runs this)
    .venv/bin/python benchmarks/nan_guard.py --threads 1 --cpu-time   # on a busy shared machine
    .venv/bin/python benchmarks/nan_guard.py --model resnet18         # ResNet-18 SGD step, batch 4, 64x64

One process, the runs interleaved (``harness.measure``): a plain step (zero_grad, forward,
cross-entropy, backward) of ImageNet EfficientNet-Lite0 in train mode, the same step inside
``nan_guard(model)`` (every module checked; the guard entered and left around each step, so its
hooks' installation is counted too), the same with ``sync="pass"`` (the numbers read once per
pass, the accelerator's default, here on the CPU), and the same step under
``torch.autograd.detect_anomaly()``. Prints the Markdown table, then one ``ROW {json}`` per row.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict

import torch
import torch.nn.functional as F
from torch import Tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hookscope
from harness import Case, Row, Run, table

ROUNDS = 10


def case(batch: int = 8, size: int = 224, rounds: int = ROUNDS) -> Case:
    model = hookscope.zoo.efficientnet_lite0().train()
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, size, size, generator=generator)
    y = torch.randint(0, 1000, (batch,), generator=generator)

    def step() -> Tensor:
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss.detach()

    def guarded(**options: object) -> Run:
        def run() -> Tensor:
            with hookscope.nan_guard(model, **options):  # type: ignore[arg-type]
                return step()

        return run

    def anomaly() -> Run:
        def run() -> Tensor:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Anomaly Detection has been enabled..." on each entry
                with torch.autograd.detect_anomaly():
                    return step()

        return run

    tools: dict[str, Callable[[], Run]] = {
        "nan_guard": lambda: guarded(),
        "nan_guard sync='pass'": lambda: guarded(sync="pass"),
        "torch.autograd.detect_anomaly": anomaly,
    }
    title = f"EfficientNet-Lite0 forward + backward, train mode, batch {batch}, {size}x{size}"
    return Case(title, step, tools, rounds)


def resnet_case(batch: int = 4, size: int = 64, rounds: int = ROUNDS) -> Case:
    """ResNet-18 (10 classes, random init) SGD steps (zero_grad, forward, backward, step): plain, inside a
    ``nan_guard(model, opt)`` opened once around the steps (a training loop's use), and entered around each.
    Each run has its own copy of the model (an open guard's hooks stay on its copy)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, size, size, generator=generator)
    y = torch.randint(0, 10, (batch,), generator=generator)

    def stepper() -> tuple[torch.nn.Module, torch.optim.Optimizer, Run]:
        import torchvision

        torch.manual_seed(0)
        model = torchvision.models.resnet18(num_classes=10)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

        def step() -> Tensor:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()

        return model, opt, step

    def open_guard() -> Run:
        model, opt, step = stepper()
        hookscope.nan_guard(model, opt).__enter__()  # open for the whole benchmark, as around a training loop
        return step

    def per_step() -> Run:
        model, opt, step = stepper()

        def run() -> Tensor:
            with hookscope.nan_guard(model, opt):
                return step()

        return run

    tools: dict[str, Callable[[], Run]] = {
        "nan_guard, open around the steps": open_guard,
        "nan_guard, entered around each step": per_step,
    }
    return Case(f"ResNet-18 SGD step, batch {batch}, {size}x{size}", stepper()[2], tools, rounds)


def cpu_ratios(built: Case, rounds: int) -> list[Row]:
    """Like ``harness.measure`` (warm-up, interleaved rounds, rotated order, median of per-round ratios),
    timed with the process's CPU time: on a shared machine, other processes' load barely moves it
    (with one thread, CPU time is the work done; wall time also counts the waits for a core)."""
    runs = {"bare": built.bare, **{name: factory() for name, factory in built.tools.items()}}
    names = list(runs)
    for name in names:
        runs[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            start = time.process_time()
            out = runs[name]()
            times[name].append(time.process_time() - start)
            del out
    rows = []
    for name, ts in times.items():
        ratios = [t / b for t, b in zip(ts, times["bare"], strict=True)]
        row = Row(built.title + ", CPU time", name, ms=statistics.median(ts) * 1e3)
        row.ratio, row.low, row.high = statistics.median(ratios), min(ratios), max(ratios)
        row.extra["bare_ms"] = statistics.median(times["bare"]) * 1e3
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="batch 2 at 64x64, 2 rounds: shows that it runs")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--model", choices=("lite0", "resnet18"), default="lite0")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cpu-time", action="store_true", help="time with the process's CPU time (shared machines)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.model == "resnet18":
        built = resnet_case(2, 32, 2) if args.smoke else resnet_case(rounds=args.rounds)
    else:
        built = case(2, 64, 2) if args.smoke else case(rounds=args.rounds)
    rows = cpu_ratios(built, built.rounds) if args.cpu_time else built.run(memory=False)
    print(table(rows))
    for row in rows:
        print("ROW " + json.dumps(asdict(row)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
