"""The benchmark in seconds, with hookscope's own environment only: hookscope, hand-written hooks, bare.

    .venv/bin/python benchmarks/smoke.py

Tiny sizes and few rounds: it shows that the harness and the cases run. It checks speed loosely:
each case of ``LIMITS`` (the hooked call, the capture loop, nan_guard, watch's logged step) stays
under a ratio about twice what it measures today, so a 2x regression fails (CI runs it through
tests/test_bench_smoke.py). Prints the Markdown table, one ``ROW {json}`` line per row for machines
to read, then one ``LIMIT`` line per limit (``OVER`` and exit 1 past it). The token stream
(``stores.smoke``: ``StoreStream`` against the HF datasets Arrow path over a 32 MiB store) prints
its own table and ``STREAM {json}`` lines, and fails the script (exit 1) when the stream is less
than ``stores.FLOOR`` times the Arrow path in CPU time: a 2x regression of it fails CI.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

os.environ.setdefault("HOOKSCOPE_BENCH_CLOCK", "cpu")  # process CPU time: CI's shared cores barely move it

import harness
import loop
import nan_guard
import percall
import stores
import vision
import watch

# (case, tool) -> the ratio that fails the run: below twice today's ratio on a loaded 2-core machine
# (docs/benchmarks.md, "The hooked call, the loop, nan_guard and watch"), above its noise: 2x slower fails CI
LIMITS = {
    ("per hooked call", "hookscope clone=False"): 2.5,  # per call, over the append-only hand-written hook's
    ("capture loop", "hookscope capture loop (clear() per batch)"): 2.2,
    ("nan_guard", "nan_guard, open around the steps"): 2.3,
    ("watch", "watch, logged step"): 3.0,  # LeNet: its step is short, what watch adds per step weighs more
}


def main() -> int:
    torch.set_num_threads(1)
    vision.SIZE = 32
    rows = vision.leaves(2).run(["hookscope", "hand-written clone hooks"], rounds=3)
    rows += vision.layers(2).run(["hookscope", "hand-written clone hooks"], rounds=3, memory=False)
    rows += vision.convs(2).run(["hookscope", "hand-written tensor hooks"], rounds=3, memory=False)
    calls = percall.per_call(n=100, rounds=5)
    rows += percall.notes(calls.run(["hand-written hook, append only", "hookscope clone=False"], memory=False), n=100)
    rows += loop.loop(batch=2, batches=2, rounds=5).run(["hookscope capture loop (clear() per batch)"], memory=False)
    rows += nan_guard.resnet_case(2, 32, 5).run(["nan_guard, open around the steps"], memory=False)
    rows += watch.logged_step("lenet", rounds=5)
    print(harness.table(rows))
    for row in rows:
        print("ROW " + json.dumps(asdict(row)))
    checked = limits(rows)
    print("\n".join(checked))
    stream = token_stream()
    return 1 if stream or any(line.startswith("OVER") for line in checked) else 0


def limits(rows: list[harness.Row]) -> list[str]:
    """One ``LIMIT`` (or ``OVER``) line per case of ``LIMITS``: its measured ratio against the limit."""
    ratio = {
        ("per hooked call", "hookscope clone=False"): _per_call(rows),
        ("capture loop", "hookscope capture loop (clear() per batch)"): _ratio(rows, "batches of", LIMITS, 1),
        ("nan_guard", "nan_guard, open around the steps"): _ratio(rows, "SGD step", LIMITS, 2),
        ("watch", "watch, logged step"): _ratio(rows, "train step", LIMITS, 3),
    }
    return [f"{'OVER' if ratio[key] > limit else 'LIMIT'} {key[0]}: {ratio[key]:.3f}x (limit {limit}x)"
            for key, limit in LIMITS.items()]  # fmt: skip


def _per_call(rows: list[harness.Row]) -> float:
    found = {r.tool: r.ratio for r in rows if "hooked call" in r.case}
    return found["hookscope clone=False"] / found["hand-written hook, append only"]


def _ratio(rows: list[harness.Row], case: str, limits: dict[tuple[str, str], float], at: int) -> float:
    tool = list(limits)[at][1]
    return next(r.ratio for r in rows if case in r.case and r.tool == tool)


def token_stream() -> int:
    """The token stream against the Arrow path: its table and rows; 1 when it is under ``stores.FLOOR``."""
    root = tempfile.mkdtemp()
    try:
        found = stores.smoke(Path(root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n" + stores.table(found))
    for row in found:
        print("STREAM " + json.dumps(row))
    ratio = next(row for row in found if row["reader"] == stores.STREAM)["cpu_vs_arrow"][0]
    if ratio < stores.FLOOR:
        print(f"the token stream is {ratio:.2f}x the Arrow path, under {stores.FLOOR}x", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
