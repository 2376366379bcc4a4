"""A store killed at any moment keeps what was finished; a damaged shard costs only its own batches.

The killed runs are real extractions in another process (``tests.jobs durable``): 40 batches that
each take 60 ms, into shards that never fill, flushed every ``DURABLE_FLUSH`` seconds. The job logs
when each batch is finished (handed to the writer); the oracle is that log, the kill time and an
uninterrupted run of the same job.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import hookscope
from hookscope import load
from hookscope.store.extract import extract
from tests.jobs import DURABLE_BATCHES, DURABLE_FLUSH, images, small_net

ROOT = Path(__file__).resolve().parents[2]
SLACK = 1.0  # seconds for the writer to write a small shard on a busy machine, beyond flush_every


def start(out: Path, log: Path, *extra: str) -> subprocess.Popen[str]:
    """The durable job, its stderr to ``log.err`` (read when it ends)."""
    command = [sys.executable, "-m", "tests.jobs", "durable", str(out), str(log), *extra]
    with open(log.with_suffix(".err"), "w", encoding="utf-8") as stderr:
        return subprocess.Popen(command, cwd=ROOT, stderr=stderr, text=True)


def finished(log: Path) -> dict[int, float]:
    """Batch -> when it was finished, from the job's log (a line cut by the kill is not counted)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return {int(i): float(t) for i, t in (line.split() for line in lines if len(line.split()) == 2)}


def wait_until(condition: Callable[[], object], process: subprocess.Popen[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"the job ended before it could be stopped (rc {process.returncode})"
        assert time.monotonic() < deadline, "the job did not get going"
        time.sleep(0.01)


def resume(out: Path, *extra: str) -> None:
    job = subprocess.run([sys.executable, "-m", "tests.jobs", "durable", str(out), "-", "--resume", *extra],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert job.returncode == 0, job.stderr


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> hookscope.Run:
    out = tmp_path_factory.mktemp("whole") / "whole"
    return extract(small_net(), images(DURABLE_BATCHES, 32), out=out, select=["0", "2"], progress=False)


def assert_batches_equal(run: hookscope.Run, reference: hookscope.Run, batches: list[int]) -> None:
    for index in batches:
        for site in ("0", "2"):
            assert torch.equal(run.batch(index)[site].output, reference.batch(index)[site].output), (index, site)


def test_a_run_killed_at_random_moments_keeps_every_batch_finished_before_the_bound(
    tmp_path: Path, reference: hookscope.Run
) -> None:
    moments = random.Random(20261203)
    kept_any = False
    for trial in range(3):
        out, log = tmp_path / f"killed{trial}", tmp_path / f"log{trial}"
        process = start(out, log)
        try:
            wait_until(lambda log=log: finished(log), process)  # the first batch is done: the run is going
            time.sleep(moments.uniform(0.6, 1.6))
            killed_at = time.monotonic()
            process.send_signal(signal.SIGKILL)
        finally:
            process.kill()
            process.wait()
        done = finished(log)
        must = sorted(i for i, t in done.items() if t <= killed_at - DURABLE_FLUSH - SLACK)
        run = load(out)
        assert not run.complete and set(must) <= set(run.batches), (must, run.batches)
        assert set(run.batches) <= set(range(max(done) + 2))  # nothing that was not finished (or being logged)
        assert_batches_equal(run, reference, run.batches)
        kept_any = kept_any or bool(must)
        resume(out)
        resumed = load(out)
        assert resumed.complete and resumed.batches == list(range(DURABLE_BATCHES))
        assert_batches_equal(resumed, reference, resumed.batches)
        assert not list(out.rglob(".*.tmp"))
    assert kept_any, "no trial ran long enough to test the bound"


def test_a_statistics_run_killed_keeps_its_checkpoint_within_the_bound(tmp_path: Path) -> None:
    out, log = tmp_path / "stats", tmp_path / "log"
    process = start(out, log, "--stats")
    try:
        wait_until(lambda: len(finished(log)) >= 3, process)
        time.sleep(1.2 + DURABLE_FLUSH)
        killed_at = time.monotonic()
    finally:
        process.kill()
        process.wait()
    done = finished(log)
    must = {i for i, t in done.items() if t <= killed_at - DURABLE_FLUSH - SLACK}
    run = load(out)
    assert must and must <= set(run.batches) <= set(range(max(done) + 2))
    batches = list(images(DURABLE_BATCHES, 32))
    with torch.no_grad():
        expected = torch.cat([small_net()[0](batches[i]).flatten() for i in run.batches]).double()
    assert run.stats("0").count == expected.numel()
    assert run.stats("0").mean == pytest.approx(float(expected.mean()), rel=1e-9, abs=1e-12)
    resume(out, "--stats")
    assert load(out).complete and load(out).batches == list(range(DURABLE_BATCHES))


def test_ctrl_c_keeps_every_finished_batch_and_says_how_to_resume(tmp_path: Path, reference: hookscope.Run) -> None:
    out, log = tmp_path / "interrupted", tmp_path / "log"
    process = start(out, log)
    try:
        wait_until(lambda: len(finished(log)) >= 5, process)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    finally:
        process.kill()
    stderr = log.with_suffix(".err").read_text()
    assert process.returncode == -signal.SIGINT  # KeyboardInterrupt propagated: Python ends by the signal
    run = load(out)
    assert set(finished(log)) <= set(run.batches) and len(run.batches) < DURABLE_BATCHES
    assert f"keeps the {len(run.batches)} batches finished before it" in stderr and "resume=True" in stderr
    assert_batches_equal(run, reference, run.batches)
    resume(out)
    assert_batches_equal(load(out), reference, list(range(DURABLE_BATCHES)))


def test_ctrl_c_on_the_command_line_exits_130_naming_resume(tmp_path: Path) -> None:
    model = tmp_path / "slow.py"
    model.write_text(
        "import time, torch\nfrom torch import nn\n"
        "class Slow(nn.Sequential):\n"
        "    def forward(self, x):\n        time.sleep(0.05)\n        return super().forward(x)\n"
        "def slow():\n    torch.manual_seed(0)\n    return Slow(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()\n"
    )
    out = tmp_path / "cli.hookscope"
    command = [sys.executable, "-m", "hookscope", "extract", f"{model}:slow", "random:400x3x16x16", "--batch-size",
               "4", "--out", str(out), "--flush-every", "0.2", "--no-progress"]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(list((out / "shards").glob("*.safetensors"))) >= 2, process)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    kept = load(out).batches
    assert process.returncode == 130 and stderr.count("\n") == 1, stderr
    assert f"keeps the {len(kept)} batches" in stderr and "--resume" in stderr and "resume=True" not in stderr
    assert 2 <= len(kept) < 100 and kept == list(range(len(kept)))
    again = subprocess.run([*command, "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert load(out).complete and load(out).batches == list(range(100))


def test_flush_every_must_be_a_positive_number(tmp_path: Path) -> None:
    for wrong in (0, -1.0, "5", True):
        with pytest.raises(hookscope.OptionError, match="flush_every must be a number of seconds above 0"):
            extract(small_net(), images(1, 8), out=tmp_path / "x", flush_every=wrong)  # type: ignore[arg-type]
        assert not (tmp_path / "x").exists()


# -- damaged shards ----------------------------------------------------------------------------
def one_shard_per_batch(out: Path, batches: int = 8) -> hookscope.Run:
    return extract(small_net(), images(batches, 8), out=out, select=["0", "2"], shard_size=1, progress=False)


def shard_of(run: hookscope.Run, batch: int) -> Path:
    """The file holding ``batch`` (one batch per shard here), from the manifest's index."""
    rows = [dict(zip(run.manifest["tensor_columns"], row, strict=True)) for row in run.manifest["tensors"]]
    (number,) = {row["shard"] for row in rows if row["batch"] == batch}
    return run.path / run.manifest["shards"][number]["file"]


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def as_if_killed(root: Path) -> None:
    """The manifest a killed run leaves: marked running, no index (the shards describe themselves)."""
    manifest = json.loads((root / "manifest.json").read_text())
    manifest.update(status="running", batches=[], shards=[], tensors=[], layouts={})
    (root / "manifest.json").write_text(json.dumps(manifest))


def test_a_truncated_shard_costs_its_own_batch_only(tmp_path: Path) -> None:
    reference = one_shard_per_batch(tmp_path / "whole")
    store = one_shard_per_batch(tmp_path / "cut")
    damaged = shard_of(store, 3)
    damaged.write_bytes(damaged.read_bytes()[:-100])
    with pytest.warns(hookscope.StoreWarning, match=rf"{damaged.name} is damaged .*; batch 3 left out, the other 7"):
        run = load(store.path)
    assert run.batches == [0, 1, 2, 4, 5, 6, 7] and list(run.damaged) == [f"shards/{damaged.name}"]
    assert_batches_equal(run, reference, run.batches)
    expected = [reference.batch(b)["0"].output for b in run.batches]
    assert all(torch.equal(c.value_of("output"), e) for c, e in zip(run["0"].calls, expected, strict=True))
    with pytest.raises(hookscope.DamagedShardError, match=rf"{damaged.name} is damaged.*batch 3 was in it"):
        run.batch(3)
    assert "damaged: batch 3 lost with 1 shard(s)" in run.describe()


def test_a_bit_flip_in_a_tensor_fails_its_checksum_and_costs_its_batch_only(tmp_path: Path) -> None:
    reference = one_shard_per_batch(tmp_path / "whole")
    store = one_shard_per_batch(tmp_path / "flipped")
    damaged = shard_of(store, 5)
    data_start = next(s["data_start"] for s in store.manifest["shards"] if s["file"].endswith(damaged.name))
    flip(damaged, data_start + 41)
    run = load(store.path)  # the size is right: nothing to see until the bytes are read
    assert run.batches == list(range(8))
    with pytest.warns(hookscope.StoreWarning, match=rf"{damaged.name} is damaged \(bytes .* fail their checksum\)"):
        record = run["0"]
    assert len(record.calls) == 8 and len(list(record.calls)) == 7 and run.batches == [0, 1, 2, 3, 4, 6, 7]
    with pytest.raises(hookscope.DamagedShardError, match=r"batch 5 \(calls\[5\] of '0'\) was in it"):
        record.calls[5]  # batch 5 keeps its place: calls[6] is batch 6
    assert torch.equal(record.calls[6].output, reference.batch(6)["0"].output)
    assert_batches_equal(run, reference, run.batches)
    with pytest.raises(hookscope.DamagedShardError, match="batch 5 was in it"):
        run.batch(5)
    unchecked = load(store.path, verify=False).batch(5)  # verify=False reads what is there, flipped bit included
    assert not all(torch.equal(unchecked[s].output, reference.batch(5)[s].output) for s in ("0", "2"))


@pytest.mark.parametrize("damage", ["header", "truncated"])
def test_a_killed_run_with_a_damaged_shard_opens_and_resume_extracts_it_again(tmp_path: Path, damage: str) -> None:
    reference = one_shard_per_batch(tmp_path / "whole")
    store = one_shard_per_batch(tmp_path / "killed")
    damaged = shard_of(store, 2)
    as_if_killed(store.path)
    if damage == "header":
        flip(damaged, 8)  # the header's opening brace: not JSON any more
    else:
        damaged.write_bytes(damaged.read_bytes()[:-1])
    with pytest.warns(hookscope.StoreWarning, match=rf"{damaged.name} is damaged"):
        run = load(store.path)
    assert run.batches == [0, 1, 3, 4, 5, 6, 7] and not run.complete
    assert_batches_equal(run, reference, run.batches)
    with pytest.warns(hookscope.StoreWarning, match=rf"moved 1 damaged file\(s\) to damaged/.*{damaged.name}"):
        extract(small_net(), images(8, 8), out=store.path, select=["0", "2"], shard_size=1, progress=False,
                resume=True)  # fmt: skip
    resumed = load(store.path)
    assert resumed.complete and resumed.batches == list(range(8)) and not resumed.damaged
    assert_batches_equal(resumed, reference, resumed.batches)
    assert (store.path / "damaged" / damaged.name).is_file()


def test_the_command_line_names_resume_as_a_flag_for_a_damaged_store(tmp_path: Path) -> None:
    store = one_shard_per_batch(tmp_path / "cut")
    damaged = shard_of(store, 1)
    damaged.write_bytes(damaged.read_bytes()[:-10])
    job = subprocess.run([sys.executable, "-m", "hookscope", "info", str(store.path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert job.returncode == 0, job.stderr
    assert f"{damaged.name} is damaged" in job.stderr and "batch 1 left out" in job.stderr
    assert "--resume extracts them again" in job.stderr and "resume=True" not in job.stderr
    assert "damaged: batch 1 lost with 1 shard(s)" in job.stdout
