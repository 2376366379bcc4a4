"""Under torchrun: two processes write one store, equal to the store of a single process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hookscope.store import load
from tests.test_extract import ROOT, assert_equal_runs

TORCHRUN = Path(sys.executable).with_name("torchrun")


def job(*command: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    env["OMP_NUM_THREADS"] = "1"  # as torchrun sets it: the same kernels, so the same bits, in both runs
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed beside this Python")
def test_two_ranks_write_the_store_one_process_writes(tmp_path: Path) -> None:
    job(str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "tests.jobs", "ranks", str(tmp_path / "two"))
    job(sys.executable, "-m", "tests.jobs", "ranks", str(tmp_path / "one"))

    two, one = load(tmp_path / "two" / "acts"), load(tmp_path / "one" / "acts")
    assert two.complete and two.config["world_size"] == 2 and one.config["world_size"] == 1
    assert [b["rank"] for b in two.manifest["batches"]] == [0, 1, 0, 1]  # a DataLoader's batches, shared out
    assert {s["file"].split("/")[1][:3] for s in two.manifest["shards"]} == {"r0-", "r1-"}  # each rank its shards
    assert two.rows == one.rows == 10
    assert_equal_runs(two, one)

    two_stats, one_stats = load(tmp_path / "two" / "stats"), load(tmp_path / "one" / "stats")
    assert two_stats.batches == one_stats.batches == [0, 1, 2, 3, 4]  # a generator, strided over the ranks
    assert two_stats.statistics().keys() == one_stats.statistics().keys()
    for label, merged in two_stats.statistics().items():
        alone = one_stats.statistics()[label]
        assert (merged.count, merged.min, merged.max) == (alone.count, alone.min, alone.max)
        assert merged.hist.tolist() == alone.hist.tolist()
        assert merged.mean == pytest.approx(alone.mean, rel=1e-12, abs=1e-15)
        assert merged.var == pytest.approx(alone.var, rel=1e-12)
        assert merged.channels is not None and alone.channels is not None
        assert merged.channels.mean.tolist() == pytest.approx(alone.channels.mean.tolist(), rel=1e-12, abs=1e-15)


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed beside this Python")
def test_the_command_line_under_torchrun(tmp_path: Path) -> None:
    command = ["-m", "hookscope", "extract", "lenet", "random:14x1x32x32", "--batch-size", "4", "--select", "conv*"]
    job(str(TORCHRUN), "--standalone", "--nproc-per-node", "2", *command, "--out", str(tmp_path / "two"))
    job(sys.executable, *command, "--out", str(tmp_path / "one"))
    two, one = load(tmp_path / "two"), load(tmp_path / "one")
    assert two.config["world_size"] == 2 and two.batches == [0, 1, 2, 3] and two.rows == 14
    assert_equal_runs(two, one)
