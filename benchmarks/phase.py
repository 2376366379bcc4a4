"""What telling a checkpoint's recomputation from a forward call costs per hooked call.

Every hook of ``capture``, ``edit`` and ``watch`` asks ``hookscope.core.phase.call_phase()`` once
per call. This measures it in one process, interleaved: 500 tiny modules (``nn.Linear(8, 8)``),
each with a forward hook that does nothing, against the same hook calling ``call_phase()``; with
gradients on (two C calls) and under ``torch.no_grad()`` (where the reentrant checkpoint's first
pass is looked for on the Python stack). Prints the median ratio and the microseconds added per call.

    .venv/bin/python benchmarks/phase.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hookscope.core.phase import call_phase

MODULES, ROUNDS = 500, 40


def hooked(hook: Callable[..., Any]) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(MODULES)])
    for module in model:
        module.register_forward_hook(hook)
    return model


def timed(model: nn.Module, x: torch.Tensor, grad: bool) -> float:
    with torch.set_grad_enabled(grad):
        start = time.perf_counter()
        model(x)
        return time.perf_counter() - start


def main() -> None:
    torch.set_num_threads(1)
    x = torch.randn(1, 8)
    def asks(*_: Any) -> None:
        call_phase()

    plain, phased = hooked(lambda *_: None), hooked(asks)
    for grad in (True, False):
        ratios, added = [], []
        for _ in range(ROUNDS):
            a, b = timed(plain, x, grad), timed(phased, x, grad)
            ratios.append(b / a)
            added.append((b - a) / MODULES * 1e6)
        print(f"{'grad' if grad else 'no_grad':8} call_phase() hooks / no-op hooks: {statistics.median(ratios):.3f}x "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}), +{statistics.median(added):.2f} µs per call")


if __name__ == "__main__":
    main()
