"""A loop of captures: every leaf of ResNet-18, batch after batch, ``cap.clear()`` between batches.

* ``loop-b8``: ``BATCHES`` batches of 8 at 224x224 (eval, no_grad) per run. The bare loop runs the
  model over them; hookscope opens one capture around the loop and clears it after each batch (what
  a dataset loop does); the hand-written clone hooks are registered around the loop and their lists
  emptied after each batch. Each tool keeps the last batch's 60 outputs, 239 MB.

From the second batch on, hookscope's copies land in the memory of the copies ``clear()`` dropped
(``hookscope.core.pool``), where a hand-written hook's clone asks the allocator for fresh pages.

    .venv/bin/python benchmarks/loop.py          # this case alone, in one process (also run.py --only loop)
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import Tensor, nn

import hookscope
import tools
from harness import Case, Run
from vision import image_batch, resnet18

BATCHES = 4
ROUNDS = 10


def loop(batch: int = 8, batches: int = BATCHES, rounds: int = ROUNDS) -> Case:
    model = resnet18()
    data = [image_batch(batch) + i for i in range(batches)]  # distinct batches, made once
    names = tools.leaf_names(model)
    factories = {
        "hookscope capture loop (clear() per batch)": lambda: _hookscope(model, data),
        "hand-written clone hooks loop": lambda: _hand(model, data, names),
    }
    title = f"ResNet-18 every leaf, {batches} batches of {batch}"
    return Case(title, _bare(model, data), factories, rounds, tools.unpack)


def _bare(model: nn.Module, data: list[Tensor]) -> Run:
    def run() -> None:
        with torch.no_grad():
            for x in data:
                model(x)

    return run


def _hookscope(model: nn.Module, data: list[Tensor]) -> Run:
    def run() -> hookscope.Capture:
        with hookscope.capture(model) as cap, torch.no_grad():
            for i, x in enumerate(data):
                if i:
                    cap.clear()
                model(x)
        return cap

    return run


def _hand(model: nn.Module, data: list[Tensor], names: list[str]) -> Run:
    chosen = tools.modules(model, names)

    def run() -> dict[str, list[Tensor]]:
        store: dict[str, list[Tensor]] = {name: [] for name in names}

        def hook(name: str) -> Any:
            keep = store[name].append
            return lambda module, args, out: keep(out.detach().clone())

        handles = [m.register_forward_hook(hook(n)) for n, m in chosen]
        try:
            with torch.no_grad():
                for i, x in enumerate(data):
                    if i:
                        for kept in store.values():
                            kept.clear()
                    model(x)
        finally:
            for h in handles:
                h.remove()
        return store

    return run


def main() -> int:
    torch.set_num_threads(2)
    rows = loop().run(memory=False)
    bare = rows[0].ms
    for r in rows:
        print(f"{r.tool:45s} {r.ms:8.1f} ms  ratio {r.ratio:.3f}x  ({r.low:.2f}-{r.high:.2f})  bare {bare:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
