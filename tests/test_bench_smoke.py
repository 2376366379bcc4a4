"""The smoke benchmark runs end to end and prints well-formed ratios. Speed is tested loosely, by smoke.py's
own limits (a case twice as slow as today fails it, so it fails here)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

SMOKE = Path(__file__).resolve().parents[1] / "benchmarks" / "smoke.py"


def test_the_smoke_benchmark_runs_and_prints_a_ratio_for_every_tool() -> None:
    done = subprocess.run([sys.executable, str(SMOKE)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("ROW ")]
    tools = {(row["case"], row["tool"]) for row in rows}
    assert len(tools) == len(rows) == 18  # 4 cases x (bare + 2 tools), 3 x (bare + 1 tool)
    assert {tool for _, tool in tools} >= {"bare", "hookscope", "hand-written clone hooks", "hookscope clone=False"}
    for row in rows:
        assert row["note"] == "" or "µs/call" in row["note"], row  # no tool failed
        assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
        assert row["low"] <= row["ratio"] <= row["high"], row
        assert row["ms"] > 0 and row["extra"]["bare_ms"] > 0, row
    hookscope_rows = [row for row in rows if row["tool"] == "hookscope"]
    assert all(row["tensors"] > 0 for row in hookscope_rows)
    leaves = next(row for row in hookscope_rows if "every leaf" in row["case"])
    assert leaves["peak_mb"] is not None and leaves["peak_mb"] > 0
    assert "| tool | ms | bare ms | ratio to bare |" in done.stdout
    stream = [json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("STREAM ")]
    assert [row["reader"] for row in stream] == ["hf arrow, shuffled", "StoreStream, row store"]  # the token stream
    assert all(math.isfinite(row["cpu_rate"]) and row["cpu_vs_arrow"][1] <= row["cpu_vs_arrow"][0] for row in stream)
    limits = [line for line in done.stdout.splitlines() if line.startswith("LIMIT ")]
    assert [line.split(":")[0] for line in limits] == [
        "LIMIT per hooked call", "LIMIT capture loop", "LIMIT nan_guard", "LIMIT watch"
    ]  # fmt: skip


def test_the_watch_benchmark_runs_and_prints_a_ratio_for_every_tool() -> None:
    script = SMOKE.parent / "watch.py"
    done = subprocess.run([sys.executable, str(script), "--smoke", "--threads", "1"], capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("ROW ")]
    assert [row["tool"] for row in rows] == ["bare", "watch, step not logged", "watch, logged step",
                                             "watch, logged step, leaves with parameters",
                                             "hand-written TensorBoard histograms"]  # fmt: skip
    for row in rows:
        assert row["note"] == "", row  # no tool failed
        assert math.isfinite(row["ratio"]) and row["low"] <= row["ratio"] <= row["high"], row


def test_the_gpu_scripts_watch_and_extract_cases_run_on_the_cpu() -> None:
    script = SMOKE.parent / "gpu.py"
    done = subprocess.run([sys.executable, str(script), "--device", "cpu", "--quick"], capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    for tool in ("watch, step not logged", "watch(every=1), logged step", "extract, 8 blocks' outputs"):
        assert f"| {tool} |" in done.stdout, done.stdout
    assert done.stdout.count("images/s") == 3 and "failed" not in done.stdout
