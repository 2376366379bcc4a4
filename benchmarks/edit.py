"""What edits cost: hookscope.edit and patch_sweep against bare forward passes, in one process, interleaved.

    .venv/bin/python benchmarks/edit.py [--rounds 10] [--size 224] [--smoke]
    HOOKSCOPE_BENCH_CLOCK=cpu .venv/bin/python benchmarks/edit.py --threads 1   # on a shared machine

1. An edit at 3 sites of ResNet-18 (random init, batch 8, under no_grad): ``edits.zero(channels=...)``
   at ``layer1.0.conv1``, ``edits.scale(0.5)`` at ``layer2.0.conv2`` and ``edits.add(vector)`` at
   ``layer4``, against the bare forward and against hand-written forward hooks that return the same
   edited tensors (no bookkeeping). Target: at most 1.05x the bare forward.
2. ``patch_sweep`` over the n = 8 residual blocks of ResNet-18 (batch 1) against n bare forward
   passes of the same batch: one patched copy per forward (``batch_size=1``, n + 2 passes) and eight
   (``batch_size=8``, 3 passes of up to 8 rows). Target: about n forwards.

The ratio is the median over rounds of tool time / bare time of the same round (``harness``).
``--smoke`` runs everything small and fast (the tests run it); figures go to docs/benchmarks.md by hand.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

import torch
import torchvision
from torch import Tensor, nn

import hookscope
from harness import measure, table
from hookscope import edits

SITES = ("layer1.0.conv1", "layer2.0.conv2", "layer4")
BLOCKS = [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]


def resnet() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18().eval()


def plan() -> dict[str, Any]:
    return {
        "layer1.0.conv1": edits.zero(channels=[3, 17]),
        "layer2.0.conv2": edits.scale(0.5),
        "layer4": edits.add(torch.linspace(-1, 1, 512)),
    }


def hand_hooks(model: nn.Module, x: Tensor) -> Any:
    """The same three edits as plain forward hooks that return the edited tensor."""
    mask = torch.ones(64, dtype=torch.bool)
    mask[[3, 17]] = False
    vector = torch.linspace(-1, 1, 512).reshape(1, 512, 1, 1)
    hooks = {
        "layer1.0.conv1": lambda m, a, out: out * mask.reshape(1, 64, 1, 1),
        "layer2.0.conv2": lambda m, a, out: out * 0.5,
        "layer4": lambda m, a, out: out + vector,
    }
    modules = dict(model.named_modules())

    def run() -> Any:
        handles = [modules[name].register_forward_hook(hook) for name, hook in hooks.items()]
        try:
            with torch.no_grad():
                return model(x)
        finally:
            for handle in handles:
                handle.remove()

    return run


def edit_case(size: int, rounds: int) -> list[Any]:
    model, x = resnet(), torch.randn(8, 3, size, size)

    def bare() -> Any:
        with torch.no_grad():
            return model(x)

    def edited() -> Any:
        with torch.no_grad(), hookscope.edit(model, plan()):
            return model(x)

    tools = {"hookscope.edit, 3 sites": edited, "hand-written hooks, 3 sites": hand_hooks(model, x)}
    return measure(f"ResNet-18, batch 8 at {size}x{size}: an edit at 3 sites", bare, tools, rounds=rounds, memory=False)


def sweep_case(size: int, rounds: int) -> list[Any]:
    model = resnet()
    torch.manual_seed(1)
    clean, corrupt = torch.randn(1, 3, size, size), torch.randn(1, 3, size, size)

    def n_forwards() -> Any:
        with torch.no_grad():
            return [model(corrupt) for _ in BLOCKS]

    def sweep(copies: int) -> Any:
        return lambda: hookscope.patch_sweep(
            model, clean, corrupt, select=BLOCKS, target=lambda out: out[:, 0] - out[:, 1], batch_size=copies
        )

    tools = {"patch_sweep, batch_size=1": sweep(1), "patch_sweep, batch_size=8": sweep(8)}
    title = f"ResNet-18, batch 1 at {size}x{size}: patch_sweep over n = {len(BLOCKS)} blocks; bare = n forward passes"
    return measure(title, n_forwards, tools, rounds=rounds, memory=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--smoke", action="store_true", help="small and fast: 2 rounds at 64x64")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1 with HOOKSCOPE_BENCH_CLOCK=cpu)")
    args = parser.parse_args()
    size, rounds = (64, 2) if args.smoke else (args.size, args.rounds)
    torch.set_num_threads(args.threads)
    rows = edit_case(size, rounds) + sweep_case(size, rounds)
    for row in rows:
        print("ROW " + json.dumps(asdict(row)))
    print(table(rows))


if __name__ == "__main__":
    main()
