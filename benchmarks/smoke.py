"""The benchmark in seconds, with hookscope's own environment only: hookscope, hand-written hooks, bare.

    .venv/bin/python benchmarks/smoke.py

Tiny sizes and few rounds: it shows that the harness and the cases run, not how fast anything
is (CI runs it through tests/test_bench_smoke.py, which never checks a timing). Prints the
Markdown table, then one ``ROW {json}`` line per row for machines to read.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness
import percall
import vision


def main() -> int:
    torch.set_num_threads(1)
    vision.SIZE = 32
    rows = vision.leaves(2).run(["hookscope", "hand-written clone hooks"], rounds=3)
    rows += vision.layers(2).run(["hookscope", "hand-written clone hooks"], rounds=3, memory=False)
    rows += vision.convs(2).run(["hookscope", "hand-written tensor hooks"], rounds=3, memory=False)
    calls = percall.per_call(n=100, rounds=3)
    rows += percall.notes(calls.run(["hand-written hook, append only", "hookscope clone=False"], memory=False), n=100)
    print(harness.table(rows))
    for row in rows:
        print("ROW " + json.dumps(asdict(row)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
