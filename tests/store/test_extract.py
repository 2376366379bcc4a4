"""extract: a dataset streamed to a store equals the in-memory capture of each batch; memory stays flat;
killed runs open and resume; statistics match numpy over the whole data set."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.torch
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import hookscope
from hookscope import reducers
from hookscope.errors import OptionError, OutputExistsError, StoreError
from hookscope.report.html import write_page
from hookscope.store.extract import extract
from hookscope.store.reader import Run, load
from tests.jobs import images, small_net

ROOT = Path(__file__).resolve().parents[2]
SELECT = ["0", "1", "2"]


def dataset(n: int = 10, side: int = 8) -> TensorDataset:
    g = torch.Generator().manual_seed(3)
    return TensorDataset(torch.randn(n, 3, side, side, generator=g), torch.arange(n))


def captured(model: nn.Module, x: torch.Tensor, **options: Any) -> hookscope.Capture:
    with hookscope.capture(model, SELECT, **options) as cap, torch.no_grad():
        model(x)
    return cap


def assert_equal_runs(a: Run, b: Run) -> None:
    """Same batches, and every stored tensor of every batch equal, bit for bit."""
    assert a.batches == b.batches and list(a) == list(b)
    for index in a.batches:
        for site, record in a.batch(index).items():
            other = b.batch(index)[site]
            assert len(record.calls) == len(other.calls)
            for call, twin in zip(record.calls, other.calls, strict=True):
                assert call.tensors.keys() == twin.tensors.keys()
                for kind, held in call.tensors.items():
                    for key, tensor in held.items():
                        assert torch.equal(tensor, twin.tensors[kind][key]), (index, site, kind, key)


def test_every_batch_equals_its_capture(tmp_path: Path) -> None:
    model, data = small_net(), dataset()
    loader = DataLoader(data, batch_size=4)
    run = extract(model, loader, out=tmp_path / "acts", select=SELECT, kinds=("input", "output"), progress=False)
    assert run.complete and run.batches == [0, 1, 2] and run.rows == 10
    for index, (x, _) in enumerate(loader):
        cap = captured(model, x, kinds=("input", "output"))
        for site in SELECT:
            stored = run.batch(index)[site]
            assert torch.equal(stored.output, cap[site].output) and torch.equal(stored.input, cap[site].input)
        assert run.batch(index)["1"].input is run.batch(index)["0"].output  # stored once
    assert torch.equal(torch.cat(run["2"].values()), torch.cat([captured(model, x)["2"].output for x, _ in loader]))
    assert run.config["select"] == SELECT and run.config["kinds"] == ["input", "output"]
    assert run.provenance["model"] == "Sequential" and len(run["0"].calls) == 3


def test_batches_may_be_tensors_dicts_lists_generators_or_anything_with_forward(tmp_path: Path) -> None:
    model, x = small_net(), dataset().tensors[0]
    expected = captured(model, x[:4])["2"].output
    listed = extract(model, [x[:4], x[4:]], out=tmp_path / "list", select="2", progress=False)
    generated = extract(model, iter([x[:4], x[4:]]), out=tmp_path / "gen", select="2", progress=False)
    keyword = extract(
        model, [{"input": x[:4]}], out=tmp_path / "kw", select="2", progress=False,
        forward=lambda m, batch: m(batch["input"]),
    )  # fmt: skip
    unbatched = extract(model, DataLoader(x, batch_size=None), out=tmp_path / "one", select="2", progress=False)
    for run in (listed, generated, keyword):
        assert torch.equal(run.batch(0)["2"].output, expected)
    assert len(unbatched.batches) == 10 and torch.equal(unbatched.batch(3)["2"].output, model(x[3])[None][0])
    with pytest.raises(OptionError, match="cannot feed a batch of type str"):
        extract(model, ["text"], out=tmp_path / "bad", select="2", progress=False)


@pytest.mark.parametrize(
    "reduce",
    [
        reducers.spatial_mean(),
        reducers.first_rows(2),
        reducers.top_channels(3),
        reducers.cast(torch.bfloat16),
        reducers.chain(reducers.cast(torch.float16), reducers.spatial_mean()),
    ],
    ids=repr,
)
def test_reductions_shrink_what_is_written_and_equal_the_capture(tmp_path: Path, reduce: Any) -> None:
    model, x = small_net(), dataset().tensors[0]
    run = extract(model, [x], out=tmp_path / "r", select=SELECT, reduce=reduce, progress=False)
    cap = captured(model, x, reduce=reduce)
    for site in SELECT:
        assert run[site].output.dtype == cap[site].output.dtype
        assert torch.equal(run[site].output, cap[site].output)
    assert run.config["reduce"] == repr(reduce)
    assert sum(r.nbytes for r in run.contents()) < sum(captured(model, x)[s].output.nbytes for s in SELECT)


def test_reducers_do_what_they_say() -> None:
    x = torch.arange(2 * 5 * 2 * 2, dtype=torch.float32).reshape(2, 5, 2, 2)
    x[1, 0] = 100
    assert torch.equal(reducers.spatial_mean()("s", "output", "out", x), x.mean(dim=(2, 3)))
    top = reducers.top_channels(2)("s", "output", "out", x)
    assert top.shape == (2, 2, 2) and top[1, 1].tolist() == [0.0, 4.0] and top[1, 0, 0] == 100
    assert reducers.first_rows(1)("s", "output", "out", x).shape == (1, 5, 2, 2)
    assert reducers.cast(torch.float16)("s", "input", "args[0]", torch.arange(3)).dtype == torch.int64
    with pytest.raises(OptionError, match="positive int"):
        reducers.top_channels(0)
    with pytest.raises(OptionError, match="floating torch dtype"):
        reducers.cast(torch.int8)


def test_stats_only_matches_numpy_over_the_whole_data_set(tmp_path: Path) -> None:
    model, data = small_net(), dataset(n=11)
    loader = DataLoader(data, batch_size=4)
    run = extract(model, loader, out=tmp_path / "s", select=SELECT, stats_only=True, per_channel=True, progress=False)
    assert run.complete and run.batches == [0, 1, 2] and not list((tmp_path / "s" / "shards").iterdir())
    whole = captured(model, data.tensors[0])
    for site in SELECT:
        values = whole[site].output.double().numpy()
        stats = run.stats(site)
        assert stats.count == values.size and stats.updates == 3
        assert stats.mean == pytest.approx(values.mean(), rel=1e-9, abs=1e-12)
        assert stats.var == pytest.approx(values.var(), rel=1e-9)
        assert (stats.min, stats.max) == (values.min(), values.max())
        assert stats.zero_count == (values == 0).sum()
        channels = values.transpose(1, 0, 2, 3).reshape(values.shape[1], -1)
        assert stats.channels is not None
        np.testing.assert_allclose(stats.channels.mean.numpy(), channels.mean(1), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(stats.channels.var.numpy(), channels.var(1), rtol=1e-9)
    assert [row.site for row in run.contents()] == SELECT
    with pytest.raises(hookscope.NotCapturedError, match="no statistics of '0' input"):
        run.stats("0", "input")


def test_progress_shows_throughput_in_the_one_rendering(tmp_path: Path, capsys) -> None:
    stream = io.StringIO()
    extract(small_net(), DataLoader(dataset(), batch_size=4), out=tmp_path / "p", select="0", progress=stream)
    line = stream.getvalue()
    assert line.startswith("hookscope: extract 3/3, ") and "rows/s" in line and "written (" in line
    assert line.endswith("\n") and line.count("\n") == 1 and "\r" not in line
    extract(small_net(), [dataset().tensors[0]], out=tmp_path / "q", select="0")  # progress=True: on stderr too
    assert capsys.readouterr().err.startswith("hookscope: extract 1/1, ")


def test_memory_stays_under_the_bound_on_a_run_that_writes_far_more(tmp_path: Path) -> None:
    bound = 32 * 2**20
    job = run_job("memory", tmp_path / "m", "32MiB")
    measured = json.loads(job.stdout)
    grew = measured["peak"] - measured["base"]
    assert measured["written"] >= 10 * bound
    # the bound, the batch being computed (the model's output and its copy), and 48 MiB for the allocator
    # and the writer thread: glibc keeps freed 8 MiB blocks in its heap rather than returning them at once
    allowance = bound + 2 * measured["batch"] + 48 * 2**20
    assert grew <= allowance, f"resident memory grew by {grew / 2**20:.0f} MiB (allowed {allowance / 2**20:.0f})"


def test_a_killed_run_opens_with_its_completed_batches_and_resumes_to_the_same_store(tmp_path: Path) -> None:
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    process = subprocess.Popen([sys.executable, "-m", "tests.jobs", "tensors", str(killed), "--slow"], cwd=ROOT)
    try:
        wait_for(lambda: len(list((killed / "shards").glob("*.safetensors"))) >= 5, process)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    partial = load(killed)
    assert not partial.complete and 5 <= len(partial.batches) < 100
    assert partial.batches == list(range(len(partial.batches)))  # one writer, in order: a prefix
    run_job("tensors", whole)
    reference = load(whole)
    for index in partial.batches:
        for site in ("0", "2"):
            assert torch.equal(partial.batch(index)[site].output, reference.batch(index)[site].output)
    run_job("tensors", killed, "--resume")
    resumed = load(killed)
    assert resumed.complete and len(resumed.batches) == 100
    assert_equal_runs(resumed, reference)
    assert not list(killed.rglob(".*.tmp"))


def test_resume_after_an_error_runs_only_the_missing_batches(tmp_path: Path) -> None:
    model, x = small_net(), dataset(n=24).tensors[0]
    batches = list(x.split(4))
    seen: list[int] = []

    def failing(stop: int) -> Iterator[torch.Tensor]:
        for i, batch in enumerate(batches):
            if i == stop:
                raise KeyboardInterrupt
            seen.append(i)
            yield batch

    for stats_only in (False, True):
        out = tmp_path / f"s{stats_only}"
        with pytest.raises(KeyboardInterrupt):
            extract(model, failing(4), out=out, select=SELECT, stats_only=stats_only, progress=False)
        assert load(out).batches == [0, 1, 2, 3] and not load(out).complete
        seen.clear()
        resumed = extract(model, batches, out=out, select=SELECT, stats_only=stats_only, resume=True, progress=False)
        assert seen == [] and resumed.batches == list(range(6)) and resumed.complete
        whole = extract(model, batches, out=tmp_path / f"w{stats_only}", select=SELECT, stats_only=stats_only,
                        progress=False)  # fmt: skip
        if not stats_only:
            assert_equal_runs(resumed, whole)
            continue
        for site in SELECT:
            a, b = resumed.stats(site), whole.stats(site)
            assert (a.count, a.min, a.max, a.hist.tolist()) == (b.count, b.min, b.max, b.hist.tolist())
            assert a.mean == pytest.approx(b.mean, rel=1e-12) and a.var == pytest.approx(b.var, rel=1e-12)


def test_resuming_a_finished_store_adds_the_new_batches_only(tmp_path: Path) -> None:
    model, batches = small_net(), list(dataset(n=20).tensors[0].split(4))
    for stats_only in (False, True):
        out, whole = tmp_path / f"done{stats_only}", tmp_path / f"whole{stats_only}"
        extract(model, batches[:3], out=out, select=SELECT, stats_only=stats_only, progress=False)
        again = extract(model, batches[:3], out=out, select=SELECT, stats_only=stats_only, resume=True, progress=False)
        assert again.complete and again.batches == [0, 1, 2]  # nothing to do, and no warning about it
        grown = extract(model, batches, out=out, select=SELECT, stats_only=stats_only, resume=True, progress=False)
        reference = extract(model, batches, out=whole, select=SELECT, stats_only=stats_only, progress=False)
        assert grown.batches == reference.batches == [0, 1, 2, 3, 4]
        if stats_only:
            a, b = grown.stats("2"), reference.stats("2")
            assert (a.count, a.hist.tolist()) == (b.count, b.hist.tolist()) and a.var == pytest.approx(b.var)
        else:
            assert_equal_runs(grown, reference)


def test_force_replaces_hookscope_s_output_never_the_user_s_folder(tmp_path: Path) -> None:
    """extract(force=True) once emptied any folder; now only a store or another hookscope output goes."""
    model, data = small_net(), dataset()
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("mine")
    for resume in (False, True):
        with pytest.raises(OutputExistsError, match=r"holds 1 file hookscope did not write \(train\.py\)"):
            extract(model, [data.tensors[0]], out=project, select="0", force=True, resume=resume, progress=False)
    assert [p.name for p in project.iterdir()] == ["train.py"] and (project / "train.py").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    assert extract(model, [data.tensors[0]], out=tmp_path / "empty", select="0", progress=False).batches == [0]
    write_page(lambda: "<p>page</p>", tmp_path / "page")
    with pytest.raises(OutputExistsError, match=r"pass force=True to replace it \(the hookscope report there\)"):
        extract(model, [data.tensors[0]], out=tmp_path / "page", select="0", progress=False)
    replaced = extract(model, [data.tensors[0]], out=tmp_path / "page", select="0", force=True, progress=False)
    assert replaced.batches == [0] and not (tmp_path / "page" / "index.html").exists()


def test_resume_refuses_other_settings_and_unordered_loaders(tmp_path: Path) -> None:
    model, data = small_net(), dataset()
    extract(model, DataLoader(data, batch_size=4), out=tmp_path / "a", select="0", progress=False)
    with pytest.raises(OutputExistsError, match=r"already exists; pass resume=True .* or force=True"):
        extract(model, [data.tensors[0]], out=tmp_path / "a", select="0", progress=False)
    with pytest.raises(StoreError, match=r"cannot resume .* kinds \['output'\] \(now \['input'\]\)"):
        extract(model, [data.tensors[0]], out=tmp_path / "a", select="0", kinds="input", resume=True, progress=False)
    with pytest.raises(StoreError, match="weights"):
        extract(small_net().double(), [data.tensors[0]], out=tmp_path / "a", select="0", resume=True, progress=False)
    shuffled = DataLoader(data, batch_size=4, shuffle=True)
    with pytest.raises(OptionError, match="shuffled DataLoader"):
        extract(model, shuffled, out=tmp_path / "a", select="0", resume=True, progress=False)
    seeded = DataLoader(data, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))
    again = extract(model, seeded, out=tmp_path / "b", select="0", progress=False, resume=True)
    assert again.batches == [0, 1, 2]
    replaced = extract(model, [data.tensors[0]], out=tmp_path / "a", select="0", force=True, progress=False)
    assert replaced.batches == [0]
    with pytest.raises(OptionError, match="forward kinds"):
        extract(model, [data.tensors[0]], out=tmp_path / "g", kinds=("output", "grad_output"), progress=False)


def test_a_full_disk_is_one_clear_error_and_leaves_every_written_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = safetensors.torch.save_file
    calls = []

    def fill_up(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(*args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "save_file", fill_up)
    batches = list(dataset(n=24).tensors[0].split(4))
    with pytest.raises(StoreError, match=r"No space left on device; the store keeps the 2 batches .* resume=True"):
        extract(small_net(), batches, out=tmp_path / "full", select="0", shard_size=1, progress=False)
    assert load(tmp_path / "full").batches == [0, 1]
    assert not list((tmp_path / "full").rglob(".*.tmp"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot write the store"):
        extract(small_net(), batches, out=tmp_path / "file" / "store", progress=False)


def test_a_file_size_limit_is_reported_like_a_full_disk(tmp_path: Path) -> None:
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))\n"
        "from hookscope.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    out = tmp_path / "limited"
    job = subprocess.run(
        [sys.executable, "-c", script, "extract", "tests/jobs.py:small_net", "random:64x3x32x32", "--batch-size",
         "4", "--out", str(out), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert job.returncode == 1
    assert job.stderr.count("\n") == 1 and "File too large" in job.stderr and "resume" in job.stderr
    assert load(out).batches == list(range(len(load(out).batches))) and not load(out).complete


def run_job(*args: object) -> subprocess.CompletedProcess[str]:
    job = subprocess.run(
        [sys.executable, "-m", "tests.jobs", *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert job.returncode == 0, job.stderr
    return job


def wait_for(condition: Any, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, "the job ended before it could be killed"
        assert time.monotonic() < deadline, "the job made no progress"
        time.sleep(0.02)


def test_images_helper_is_deterministic() -> None:
    assert torch.equal(next(images(1, 4)), next(images(1, 4)))
