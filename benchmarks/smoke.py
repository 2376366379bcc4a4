"""The benchmark in seconds, with hookscope's own environment only: hookscope, hand-written hooks, bare.

    .venv/bin/python benchmarks/smoke.py

Tiny sizes and few rounds: it shows that the harness and the cases run, not how fast anything
is (CI runs it through tests/test_bench_smoke.py, which never checks a timing). Prints the
Markdown table, then one ``ROW {json}`` line per row for machines to read. The token stream
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

import harness
import percall
import stores
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
    return token_stream()


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
