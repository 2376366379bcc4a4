"""The nan_guard benchmark runs end to end at smoke size and prints a ratio per tool. Speed is never tested here."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "nan_guard.py"


def test_the_nan_guard_benchmark_runs_and_prints_a_ratio_for_every_tool() -> None:
    command = [sys.executable, str(BENCH), "--smoke", "--threads", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("ROW ")]
    assert [row["tool"] for row in rows] == [
        "bare",
        "nan_guard",
        "nan_guard sync='pass'",
        "torch.autograd.detect_anomaly",
    ]
    for row in rows:
        assert row["note"] == "", row  # no tool failed
        assert math.isfinite(row["ratio"]) and row["low"] <= row["ratio"] <= row["high"], row
