"""The cost of one hooked call: 1,000 tiny modules (``nn.Linear(8, 8)`` on one row), one thread.

Hooks stay installed on their own copy of the model for the whole measurement (the bare run uses
an unhooked copy), so a run is one forward pass: 1,000 hooked calls. The note gives microseconds
per call and what the hook adds over a bare call. Two more rows count the set-up too: a capture
(or hand-written hooks) made and removed around every forward pass.

    .venv/bin/python benchmarks/percall.py     # the hooks side by side in one process, interleaved

prints each row and the target's figure: hookscope's time per hooked call over the append-only
hand-written hook's (``clone=False`` against append only, the default against detach+clone+append).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

import hookscope
from harness import Case, Row, Run

MODULES = 1000
ROUNDS = 30


def tiny_stack(n: int = MODULES) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(8, 8) for _ in range(n)]).eval()


def per_call(n: int = MODULES, rounds: int = ROUNDS) -> Case:
    model = tiny_stack(n)
    x = torch.randn(1, 8)
    factories: dict[str, Callable[[], Run]] = {
        "hand-written hook, append only": lambda: _hand(copy.deepcopy(model), x, clone=False),
        "hand-written hook, detach+clone+append": lambda: _hand(copy.deepcopy(model), x, clone=True),
        "hookscope clone=False": lambda: _open_capture(copy.deepcopy(model), x, clone=False),
        "hookscope (default: detach+clone)": lambda: _open_capture(copy.deepcopy(model), x, clone=True),
        "hookscope incl. set-up per pass": lambda: _capture_per_pass(model, x),
    }
    return Case(f"{n} tiny modules, µs per hooked call", _no_grad(model, x), factories, rounds, _unpack)


def notes(rows: list[Row], n: int = MODULES) -> list[Row]:
    """Microseconds per call, and added over a bare call, in each row's note."""
    for row in rows:
        if row.ms == row.ms:
            bare = row.extra.get("bare_ms", row.ms)
            total, added = row.ms * 1e3 / n, (row.ms - bare) * 1e3 / n
            row.extra |= {"us_per_call": total, "added_us_per_call": added}
            row.note = (row.note + "; " if row.note else "") + f"{total:.2f} µs/call, +{added:.2f} µs over bare"
    return rows


def _no_grad(model: nn.Module, x: Tensor) -> Run:
    def run() -> Any:
        with torch.no_grad():
            return model(x)

    return run


def _hand(model: nn.Module, x: Tensor, *, clone: bool) -> Run:
    store: list[Tensor] = []
    keep = store.append
    for module in model:
        if clone:
            module.register_forward_hook(lambda m, a, out: keep(out.detach().clone()))
        else:
            module.register_forward_hook(lambda m, a, out: keep(out))

    def run() -> list[Tensor]:
        store.clear()
        with torch.no_grad():
            model(x)
        return store

    return run


def _open_capture(model: nn.Module, x: Tensor, *, clone: bool) -> Run:
    cap = hookscope.capture(model, nn.Linear, clone=clone).__enter__()  # open for the whole benchmark

    def run() -> hookscope.Capture:
        cap.clear()
        with torch.no_grad():
            model(x)
        return cap

    return run


def _capture_per_pass(model: nn.Module, x: Tensor) -> Run:
    def run() -> hookscope.Capture:
        with hookscope.capture(model, nn.Linear) as cap, torch.no_grad():
            model(x)
        return cap

    return run


def _unpack(tool: str, result: Any) -> Any:
    if isinstance(result, hookscope.Capture):
        return [
            t for record in result.values() for call in record.calls for d in call.tensors.values() for t in d.values()
        ]
    return result if isinstance(result, list) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    pairs = {"hookscope clone=False": "hand-written hook, append only",
             "hookscope (default: detach+clone)": "hand-written hook, detach+clone+append"}  # fmt: skip
    rows = {r.tool: r for r in notes(per_call(rounds=args.rounds).run([*pairs, *pairs.values()], memory=False))}
    for row in rows.values():
        print(f"{row.tool:42s} {row.ratio:.3f}x bare ({row.low:.2f}-{row.high:.2f}); {row.note}")
    for ours, hand in pairs.items():
        print(f"{ours} per hooked call / {hand}: {rows[ours].ratio / rows[hand].ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
