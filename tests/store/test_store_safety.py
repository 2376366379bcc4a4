"""What cannot corrupt a store: fields checked before use, links refused, one writer at a time, nothing left behind.

Oracles: the values an undamaged copy of the same store gives, the process ids of real processes
(a live one, a killed one), the files on disk, and the order of renames and folder syncs seen by
wrappers of ``os.replace`` and ``sync_folder``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import hookscope
from hookscope import load
from hookscope.base import files
from hookscope.errors import DamagedShardError, StoreError, StoreWarning
from hookscope.report.html import write_page
from hookscope.store import format as store_format
from hookscope.store.extract import extract
from hookscope.store.lock import LOCK, holder
from tests.jobs import images, small_net
from tests.store.test_durability import finished, start, wait_until

ROOT = Path(__file__).resolve().parents[2]


def small_capture() -> hookscope.Capture:
    model = small_net()
    with hookscope.capture(model, ["0", "2"]) as cap:
        model(next(images(1, 6)))
    return cap


def small_extract(out: Path, **options: Any) -> hookscope.Run:
    return extract(small_net(), images(3, 6), out=out, select=["0", "2"], shard_size=1, progress=False, **options)


def dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=60)
    return process.pid


# -- every field checked -------------------------------------------------------------------------
def test_a_manifest_field_of_the_wrong_type_is_a_store_error_naming_the_file_and_the_field(tmp_path: Path) -> None:
    hookscope.save(small_capture(), tmp_path / "s")
    path = tmp_path / "s" / "manifest.json"
    good = json.loads(path.read_text())
    for change, field in [
        ({"sites": [{**good["sites"][0], "kinds": "output"}, good["sites"][1]]}, r"sites\[0\]\.kinds must be a list"),
        ({"config": {"nested": [[[[[[[[0]]]]]]]] * 10 + [json.loads("[" * 70 + "]" * 70)]}}, "config must be nested"),
        ({"status": 3}, "status must be 'running' or 'complete', got 3"),
        ({"shards": [{**good["shards"][0], "data_start": -4}]}, r"shards\[0\]\.data_start must be an integer"),
    ]:
        path.write_text(json.dumps({**good, **change}))
        with pytest.raises(StoreError, match=rf"{path} is damaged: {field}"):
            load(tmp_path / "s")


def test_a_row_whose_shape_does_not_fit_its_bytes_costs_its_shard_only(tmp_path: Path) -> None:
    reference = small_extract(tmp_path / "whole")
    store = small_extract(tmp_path / "edited")
    path = store.path / "manifest.json"
    manifest = json.loads(path.read_text())
    row = manifest["tensors"][0]
    row[9] = [row[9][0] * 2, *row[9][1:]]  # twice the rows: more bytes than the offsets give
    path.write_text(json.dumps(manifest))
    shard = manifest["shards"][row[6]]["file"]
    with pytest.warns(StoreWarning, match=rf"shard {shard} is damaged \(the manifest's row tensors\[0\] \(offsets\)"):
        run = load(store.path)
    assert run.batches == [b for b in reference.batches if b != row[3]]
    for b in run.batches:
        assert torch.equal(run.batch(b)["2"].output, reference.batch(b)["2"].output)


def test_a_manifest_that_names_another_tensor_than_its_shard_holds_costs_that_shard(tmp_path: Path) -> None:
    """Rows that pass every check alone (two tensors of one shape swapped) still fail the shard's own header."""
    reference = small_extract(tmp_path / "whole")
    store = small_extract(tmp_path / "swapped")
    path = store.path / "manifest.json"
    manifest = json.loads(path.read_text())
    rows = manifest["tensors"]
    a, b = [i for i, row in enumerate(rows) if row[0] == "0"][:2]  # site "0" in batches 0 and 1: one shape
    rows[a][3], rows[b][3] = rows[b][3], rows[a][3]
    path.write_text(json.dumps(manifest))
    with pytest.warns(StoreWarning, match="differ from what its header says"):
        record = load(store.path)["0"]
    assert len(record.calls) == 3 and torch.equal(record.calls[2].output, reference.batch(2)["0"].output)
    assert [c.index for c in record.calls] == [2]  # the lost batches keep their places
    with pytest.raises(hookscope.DamagedShardError, match=r"batch 0 \(calls\[0\] of '0'\) was in it"):
        record.calls[0]


# -- links ---------------------------------------------------------------------------------------
def test_a_shard_that_is_a_link_to_a_file_outside_is_never_followed(tmp_path: Path) -> None:
    store = small_extract(tmp_path / "store")
    shard = store.path / store.manifest["shards"][1]["file"]
    outside = tmp_path / "outside.safetensors"
    shutil.copy(shard, outside)  # a valid shard with the very bytes: only the link stands between
    shard.unlink()
    shard.symlink_to(outside)
    with pytest.warns(StoreWarning, match=rf"{shard.name} is damaged \(it is a symbolic link"):
        run = load(store.path)
    assert run.batches == [0, 2]
    with pytest.raises(DamagedShardError, match="symbolic link"):
        run.batch(1)
    as_running(store.path)  # an interrupted store is indexed from its shards: the link is listed damaged
    with pytest.warns(StoreWarning, match="symbolic link"):
        assert load(store.path).batches == [0, 2]


def test_a_shards_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    store = small_extract(tmp_path / "store")
    (store.path / "shards").rename(tmp_path / "elsewhere")
    (store.path / "shards").symlink_to(tmp_path / "elsewhere")
    with pytest.warns(StoreWarning, match="symbolic link"):
        assert load(store.path).batches == []
    as_running(store.path)
    with pytest.raises(StoreError, match="shards is a symbolic link"):
        load(store.path)


def as_running(root: Path) -> None:
    manifest = json.loads((root / "manifest.json").read_text())
    manifest.update(status="running", batches=[], shards=[], tensors=[], layouts={})
    (root / "manifest.json").write_text(json.dumps(manifest))


# -- one writer ----------------------------------------------------------------------------------
def test_a_second_writer_is_refused_naming_the_first_and_takes_over_once_it_is_killed(tmp_path: Path) -> None:
    out, log = tmp_path / "store", tmp_path / "log"
    process = start(out, log)
    try:
        wait_until(lambda: finished(log), process)
        assert (holder(out) or {}).get("pid") == process.pid
        with pytest.raises(StoreError, match=rf"is being written by process {process.pid} on host "):
            extract(small_net(), images(40, 32), out=out, select=["0", "2"], progress=False, resume=True)
        with pytest.raises(StoreError, match=rf"process {process.pid}"):
            extract(small_net(), images(40, 32), out=out, select=["0", "2"], progress=False, force=True)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    assert holder(out) is not None  # a killed writer cannot remove its lock: the next one takes it over
    run = extract(small_net(), images(40, 32), out=out, select=["0", "2"], progress=False, resume=True)
    assert run.complete and run.batches == list(range(40)) and holder(out) is None


def test_a_stale_lock_of_a_dead_process_is_taken_over_and_a_finished_run_leaves_none(tmp_path: Path) -> None:
    store = small_extract(tmp_path / "store")
    assert not (store.path / LOCK).exists()
    (store.path / LOCK).write_text(json.dumps({"pid": dead_pid(), "host": os.uname().nodename, "since": 0}))
    assert small_extract(store.path, resume=True).complete and not (store.path / LOCK).exists()
    (store.path / LOCK).write_text(json.dumps({"pid": 1, "host": "another-machine", "since": 0}))
    with pytest.raises(StoreError, match=rf"process 1 on host another-machine .*remove {store.path / LOCK}"):
        small_extract(store.path, resume=True)
    (store.path / LOCK).unlink()

    def fails_at_batch_two(model: torch.nn.Module, batch: torch.Tensor) -> Any:
        fails_at_batch_two.calls += 1  # type: ignore[attr-defined]
        if fails_at_batch_two.calls == 3:  # type: ignore[attr-defined]
            raise RuntimeError("the data went away")
        return model(batch)

    fails_at_batch_two.calls = 0  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="the data went away"):
        small_extract(store.path, force=True, forward=fails_at_batch_two)
    assert (store.path / "manifest.json").exists() and not (store.path / LOCK).exists()  # kept, and unlocked


# -- nothing left behind -------------------------------------------------------------------------
def test_staging_folders_of_killed_saves_and_reports_go_with_the_next_write(tmp_path: Path) -> None:
    cap = small_capture()
    for target, write in [
        (tmp_path / "acts", lambda: hookscope.save(cap, tmp_path / "acts", force=True)),
        (tmp_path / "report", lambda: write_page(lambda: "<p>page</p>", tmp_path / "report", force=True)),
    ]:
        killed = tmp_path / f".{target.name}.tmp-p{dead_pid()}-0a1b2c3d"  # what a kill -9 mid-write leaves
        set_aside = tmp_path / f".{target.name}.old-p{dead_pid()}-0a1b2c3d"
        running = tmp_path / f".{target.name}.tmp-p{os.getpid()}-0a1b2c3d"  # a write in progress: kept
        for folder in (killed, set_aside, running):
            folder.mkdir()
            (folder / "half").write_bytes(b"x" * 1000)
        write()
        assert not killed.exists() and not set_aside.exists() and running.exists()
        shutil.rmtree(running)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acts", "report"]


def test_a_watch_whose_first_write_fails_leaves_nothing_and_the_retry_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run.hookscope"
    model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with monkeypatch.context() as patched:
        patched.setattr(files, "sync", full_disk)
        with pytest.raises(StoreError, match="No space left on device"), hookscope.watch(model, opt, every=1, out=out):
            pass
    assert list(tmp_path.iterdir()) == []
    with hookscope.watch(model, opt, every=1, out=out):
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
    assert load(out).history("0").steps == [0]  # the step logged by the retry


def full_disk(path: Path) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


@pytest.mark.parametrize("where", ["sync", "replace"])
def test_every_disk_error_is_a_store_error_and_leaves_no_staging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    cap = small_capture()
    real_replace = os.replace

    def refused(src: Any, dst: Any) -> None:
        if Path(dst).name in ("acts", "report", "extracted"):  # the publishing rename only
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(dst))
        real_replace(src, dst)

    with monkeypatch.context() as patched:
        if where == "sync":  # fsync of a file or a folder: ENOSPC
            for module, name in [(files, "sync"), (files, "sync_folder"), (store_format, "sync_folder")]:
                patched.setattr(module, name, full_disk)
        else:
            patched.setattr(os, "replace", refused)
        with pytest.raises(StoreError, match=r"cannot write .*(No space left|Permission denied)"):
            hookscope.save(cap, tmp_path / "acts")
        with pytest.raises(StoreError, match=r"cannot write the report .*(No space left|Permission denied)"):
            write_page(lambda: "<p>page</p>", tmp_path / "report")
        if where == "sync":
            with pytest.raises(StoreError, match="No space left on device"):
                small_extract(tmp_path / "extracted")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_every_rename_a_store_depends_on_is_followed_by_a_sync_of_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, Path]] = []
    real_replace, real_sync = os.replace, files.sync_folder

    def replace(src: Any, dst: Any) -> None:
        real_replace(src, dst)
        events.append(("rename", Path(dst).parent))

    def sync_folder(path: Path) -> None:
        real_sync(path)
        events.append(("sync", Path(path)))

    monkeypatch.setattr(os, "replace", replace)
    for module in (files, store_format, hookscope.store.lock):
        monkeypatch.setattr(module, "sync_folder", sync_folder)
    hookscope.save(small_capture(), tmp_path / "acts")
    small_extract(tmp_path / "extracted")
    renames = [i for i, (what, _) in enumerate(events) if what == "rename"]
    assert len(renames) >= 6
    for i in renames:
        folder = events[i][1]
        assert any(what == "sync" and path == folder for what, path in events[i + 1 :]), (i, folder)


def test_a_manifest_that_is_a_link_is_refused(tmp_path: Path) -> None:
    hookscope.save(small_capture(), tmp_path / "s")
    (tmp_path / "s" / "manifest.json").rename(tmp_path / "manifest.json")
    (tmp_path / "s" / "manifest.json").symlink_to(tmp_path / "manifest.json")
    with pytest.raises(StoreError, match=r"manifest\.json is a symbolic link"):
        load(tmp_path / "s")
