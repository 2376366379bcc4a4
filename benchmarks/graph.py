"""What the module graph costs a report: build_report with the graph against build_report without it.

    .venv/bin/python benchmarks/graph.py [--rounds 8] [--size 224] [--smoke]
    HOOKSCOPE_BENCH_CLOCK=cpu .venv/bin/python benchmarks/graph.py --threads 1   # on a shared machine

1. ``build_report(model, x)`` of ResNet-18 (random init, batch 2, Grad-CAM, no gradients), with
   ``graph=True`` (the default: hooks on every module in the report's one pass, which then records
   gradients to count the bytes saved for the backward; the layout and the SVG) against
   ``graph=False``. Target: at most 1.05x.
2. The same with ``grads=True`` (the pass records gradients anyway).
3. ``module_graph(model, x)`` alone against one bare forward pass under no_grad, and against one
   forward pass with gradients recorded (what the tracer's pass is), for scale.

The ratio is the median over rounds of tool time / bare time of the same round (``harness``).
``--smoke`` runs everything small and fast; figures go to docs/benchmarks.md by hand.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

import torch
import torchvision

import hookscope
from harness import measure, table


def report_case(size: int, rounds: int, grads: bool) -> list[Any]:
    torch.manual_seed(0)
    model, x = torchvision.models.resnet18().eval(), torch.randn(2, 3, size, size)

    def without() -> Any:
        return hookscope.build_report(model, x, grads=grads, graph=False)

    tools = {"build_report with the graph": lambda: hookscope.build_report(model, x, grads=grads, graph=True)}
    title = f"ResNet-18, batch 2 at {size}x{size}: build_report{', grads=True' if grads else ''}; bare = without graph"
    return measure(title, without, tools, rounds=rounds, memory=False)


def graph_case(size: int, rounds: int) -> list[Any]:
    torch.manual_seed(0)
    model, x = torchvision.models.resnet18().eval(), torch.randn(2, 3, size, size)

    def bare() -> Any:
        with torch.no_grad():
            return model(x)

    def recorded() -> Any:
        return model(x).detach()

    tools = {"module_graph(model, x)": lambda: hookscope.module_graph(model, x), "forward, gradients recorded": recorded}
    title = f"ResNet-18, batch 2 at {size}x{size}: the graph alone; bare = one forward under no_grad"
    return measure(title, bare, tools, rounds=rounds, memory=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--smoke", action="store_true", help="small and fast: 2 rounds at 64x64")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1 with HOOKSCOPE_BENCH_CLOCK=cpu)")
    args = parser.parse_args()
    size, rounds = (64, 2) if args.smoke else (args.size, args.rounds)
    torch.set_num_threads(args.threads)
    rows = report_case(size, rounds, False) + report_case(size, rounds, True) + graph_case(size, rounds)
    for row in rows:
        print("ROW " + json.dumps(asdict(row)))
    print(table(rows))


if __name__ == "__main__":
    main()
