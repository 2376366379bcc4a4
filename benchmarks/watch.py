"""What ``hookscope.watch`` costs a training step, as ratios to a plain step in the same process, interleaved.

    .venv/bin/python benchmarks/watch.py                 # ResNet-18 (random init), batch 8, 128x128, SGD
    .venv/bin/python benchmarks/watch.py --model lite0   # EfficientNet-Lite0 (efficientnet_lite_pytorch), batch 8
    .venv/bin/python benchmarks/watch.py --smoke         # LeNet at batch 32, 3 rounds (CI runs it)

One *run* is one training step: forward, cross-entropy, zero_grad, backward, optimizer step.

* ``bare``: the plain step.
* ``watch, step not logged``: inside an open ``watch(every=50)`` on a step it does not log (the
  watch is opened with its logged steps far apart, so every timed step is one between them).
* ``watch, logged step``: inside ``watch(every=1)``: every step logged, every leaf with parameters
  and every activation watched (the default selection).
* ``watch, logged step, leaves with parameters``: the same, ``select=`` every leaf with parameters
  (the selection the issue's target names).
* ``hand-written TensorBoard histograms``: what people write instead: a forward hook on every
  leaf with parameters that sends its output to ``SummaryWriter.add_histogram``, and each
  parameter's weight and gradient after the step, every step.

Targets (issue 11): at most 1.02x on the steps not logged, at most 1.3x on a logged step.
Prints the Markdown table, then one ``ROW {json}`` line per row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness
import hookscope
from hookscope.zoo.lenet import LeNet


def build(model_name: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    if model_name == "lenet":
        return LeNet(), torch.randn(32, 1, 32, 32), torch.randint(0, 10, (32,))
    if model_name == "lite0":
        lite = hookscope.zoo.efficientnet_lite0()
        return lite.train(), torch.randn(8, 3, 224, 224), torch.randint(0, 1000, (8,))
    import torchvision

    return torchvision.models.resnet18(), torch.randn(8, 3, 128, 128), torch.randint(0, 1000, (8,))


def stepper(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> Callable[[], Any]:
    def step() -> Any:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return None

    return step


def with_parameters(name: str, module: nn.Module) -> bool:
    return next(module.children(), None) is None and next(module.parameters(), None) is not None


def inside(w: Any, step: Callable[[], Any]) -> Callable[[], Any]:
    w.__enter__()
    step()  # step 0 is logged: past it, the watch with every=10**9 sits between logged steps for good
    return step


def histogram_hooks(model: nn.Module, step: Callable[[], Any], logdir: str) -> Callable[[], Any]:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(logdir)
    count = [0]
    leaves = [
        (n, m)
        for n, m in model.named_modules()
        if next(m.children(), None) is None and next(m.parameters(), None) is not None
    ]

    def hook(name: str) -> Any:
        return lambda module, args, out: writer.add_histogram(f"{name}/output", out.detach(), count[0])

    for name, module in leaves:
        module.register_forward_hook(hook(name))

    def run() -> Any:
        step()
        for name, p in model.named_parameters():
            writer.add_histogram(f"{name}/weight", p.detach(), count[0])
            if p.grad is not None:
                writer.add_histogram(f"{name}/grad", p.grad, count[0])
        count[0] += 1

    return run


def logged_step(model_name: str = "lenet", rounds: int = 3) -> list[harness.Row]:
    """The plain step and ``watch(every=1)``'s logged step (the default selection), measured (the smoke run)."""
    model, x, y = build(model_name)
    bare = stepper(model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9), x, y)
    logged = _tool(model_name, lambda m, o, s: inside(hookscope.watch(m, o, every=1), s))()
    return harness.measure(f"train step, {model_name}", bare, {"watch, logged step": logged}, rounds=rounds,
                           memory=False)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("resnet18", "lite0", "lenet"), default="resnet18")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="LeNet, 3 rounds: shows that it runs, not its speed")
    args = parser.parse_args(argv)
    model_name, rounds = ("lenet", 3) if args.smoke else (args.model, args.rounds)
    torch.set_num_threads(args.threads)
    logdir = tempfile.mkdtemp(prefix="watch-bench-")

    tools: dict[str, Callable[[], Any]] = {}
    for name, make in (
        ("watch, step not logged", lambda m, o, s: inside(hookscope.watch(m, o, every=10**9), s)),
        ("watch, logged step", lambda m, o, s: inside(hookscope.watch(m, o, every=1), s)),
        (
            "watch, logged step, leaves with parameters",
            lambda m, o, s: inside(hookscope.watch(m, o, every=1, select=with_parameters), s),
        ),
        ("hand-written TensorBoard histograms", lambda m, o, s: histogram_hooks(m, s, logdir)),
    ):
        tools[name] = _tool(model_name, make)
    model, x, y = build(model_name)
    bare = stepper(model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9), x, y)
    title = {"lenet": "LeNet b32", "lite0": "EfficientNet-Lite0 b8 224", "resnet18": "ResNet-18 b8 128"}[model_name]
    rows = harness.measure(f"train step, {title}", bare, {n: t() for n, t in tools.items()}, rounds=rounds,
                           memory=False)  # fmt: skip
    print(harness.table(rows))
    for row in rows:
        print("ROW " + json.dumps(asdict(row)))
    return 0


def _tool(model_name: str, make: Callable[[nn.Module, torch.optim.Optimizer, Callable[[], Any]], Any]) -> Any:
    def factory() -> Callable[[], Any]:
        model, x, y = build(model_name)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        run: Callable[[], Any] = make(model, opt, stepper(model, opt, x, y))
        return run

    return factory


if __name__ == "__main__":
    sys.exit(main())
