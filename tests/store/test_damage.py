"""A damaged store, complete or interrupted: bytes flipped in a tensor's data, in a shard's header, in the manifest.

The oracle is an undamaged copy of the same store: every batch the damaged one hands out equals,
bit for bit, that batch of the copy; the damaged batch (3) is an error naming it and its shard,
never a neighbour's data. ``run[site].calls[b]`` is batch ``b``, ``hookscope info`` says
"damaged" with the batch and the shard (``--verify`` reads every checksum), and ``StoreDataset`` /
``StoreStream`` leave batch 3 out with one warning, their length right before the first epoch.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import struct
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import hookscope
from hookscope.cli.parser import build_parser
from hookscope.errors import DamagedShardError, NotCapturedError, StoreWarning
from hookscope.store.extract import extract
from tests.jobs import images, small_net

BATCHES, LOST = 10, 3
DAMAGES = ["data", "header", "manifest"]
STATES = ["complete", "interrupted"]
CASES = [(d, s) for d in DAMAGES for s in STATES if (d, s) != ("manifest", "interrupted")]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten batches of four rows, one shard each (sites "0" and "2")."""
    out = tmp_path_factory.mktemp("damage") / "good"
    extract(small_net(), images(BATCHES, 6), out=out, select=["0", "2"], shard_size=1, progress=False)
    return out


def damaged(good: Path, tmp_path: Path, damage: str, state: str) -> tuple[Path, str]:
    """A copy of ``good``, killed (its manifest as a killed run leaves it) when ``state`` says so, with
    ``damage`` done to batch 3; returns the copy and the damaged shard's file name."""
    root = tmp_path / f"{damage}-{state}"
    shutil.copytree(good, root)
    shard = shard_of(root, LOST)
    if damage == "data":  # 4 bytes of site "0"'s tensor of batch 3
        (length,) = struct.unpack("<Q", shard.read_bytes()[:8])
        begin = json.loads(shard.read_bytes()[8 : 8 + length])[f"0/output/out/call0/b{LOST}"]["data_offsets"][0]
        flip(shard, 8 + length + begin + 16, 4)
    elif damage == "header":  # one byte of a tensor's name: "call0/b3" -> "call0/c3"
        flip(shard, shard.read_bytes().index(f"call0/b{LOST}".encode()) + 6, 1)
    else:  # one byte of the row of site "0", batch 3: "float32" -> "gloat32"
        manifest = root / "manifest.json"
        flip(manifest, manifest.read_bytes().index(f'"0/output/out/call0/b{LOST}", "float32"'.encode()) + 28, 1)
    if state == "interrupted":
        as_if_killed(root)
    return root, shard.name


def shard_of(root: Path, batch: int) -> Path:
    return sorted((root / "shards").glob("*.safetensors"))[batch]


def flip(path: Path, at: int, count: int) -> None:
    data = bytearray(path.read_bytes())
    for i in range(at, at + count):
        data[i] ^= 0x01
    path.write_bytes(bytes(data))


def as_if_killed(root: Path) -> None:
    """The manifest a killed run leaves: marked running, no index (the shards describe themselves)."""
    manifest = json.loads((root / "manifest.json").read_text())
    manifest.update(status="running", batches=[], shards=[], tensors=[], layouts={})
    (root / "manifest.json").write_text(json.dumps(manifest))


def info(path: Path, *flags: str) -> str:
    args = build_parser().parse_args(["info", str(path), *flags])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        args.run(args)
    return printed.getvalue()


def kept(good: Path, site: str = "0", lost: tuple[int, ...] = (LOST,)) -> list[torch.Tensor]:
    """The oracle: the undamaged store's rows of every batch but the lost ones."""
    run = hookscope.load(good)
    return [run.batch(b)[site].output for b in range(BATCHES) if b not in lost]


@pytest.mark.parametrize(("damage", "state"), CASES)
def test_calls_are_addressed_by_batch_and_the_lost_one_raises(good: Path, tmp_path: Path, damage: str,
                                                              state: str) -> None:  # fmt: skip
    path, shard = damaged(good, tmp_path, damage, state)
    with pytest.warns(StoreWarning, match=rf"{shard} is damaged .*batch {LOST} left out"):
        calls = hookscope.load(path)["0"].calls
    reference = hookscope.load(good)
    assert len(calls) == BATCHES
    for b in (b for b in range(BATCHES) if b != LOST):
        assert calls[b].index == b and torch.equal(calls[b].output, reference.batch(b)["0"].output), b
    assert torch.equal(calls[-1].output, reference.batch(BATCHES - 1)["0"].output)
    with pytest.raises(DamagedShardError, match=rf"shard shards/{shard} is damaged: .*; batch {LOST} \(calls\[3\]"):
        calls[LOST]
    assert [c.index for c in calls] == [b for b in range(BATCHES) if b != LOST]  # iterating: the calls that read
    assert [c.index for c in calls[2:5]] == [2, 4]
    with pytest.raises(NotCapturedError, match=r"10 stored calls \(batches 0\.\.9\); calls\[10\] is not one"):
        calls[BATCHES]


def test_a_call_past_the_stored_ones_is_an_index_error_naming_the_batches(good: Path) -> None:
    calls = hookscope.load(good)["2"].calls
    with pytest.raises(IndexError, match=r"batches 0\.\.9"):
        calls[-11]
    assert [c.index for c in calls[7:]] == [7, 8, 9] and len(list(calls)) == BATCHES


@pytest.mark.parametrize(("damage", "state"), CASES)
def test_info_says_damaged_and_names_the_batch_and_the_shard(good: Path, tmp_path: Path, damage: str,
                                                             state: str) -> None:  # fmt: skip
    path, shard = damaged(good, tmp_path, damage, state)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StoreWarning)
        quick, full = info(path), info(path, "--verify")
    assert all(issubclass(w.category, StoreWarning) and shard in str(w.message) for w in caught)
    assert "data      not verified" in quick and "data      verified" in full
    head = f"damaged: batch {LOST} lost with 1 shard(s)"
    line = f"damaged   shards/{shard}: batch {LOST} ("
    if damage == "data":  # the headers and the manifest hold: only reading the bytes finds it
        assert head not in quick and "batches   10 (40 rows)" in quick
    else:
        assert head in quick and line in quick and "batches   9 (36 rows)" in quick
    assert head in full and line in full and "batches   9 (36 rows)" in full


@pytest.mark.parametrize(("damage", "state"), [(d, s) for d, s in CASES if d != "manifest"])  # manifest: below
def test_the_datasets_leave_the_damaged_batch_out_with_one_warning(good: Path, tmp_path: Path, damage: str,
                                                                    state: str) -> None:  # fmt: skip
    path, shard = damaged(good, tmp_path, damage, state)
    with pytest.warns(StoreWarning) as caught:
        data = hookscope.StoreDataset(path, "0")
    assert len(caught) == 1 and f"batch {LOST} left out" in str(caught[0].message) and shard in str(caught[0].message)
    assert len(data) == 4 * (BATCHES - 1) and LOST not in data.batches  # before the first epoch
    read = torch.cat(list(DataLoader(data, batch_size=5)))
    assert torch.equal(read, torch.cat(kept(good)))
    with pytest.warns(StoreWarning, match=rf"batch {LOST} left out") as caught:
        stream = hookscope.StoreStream(path, ["0", "2"], minibatch=3, seed=1)
    assert len(caught) == 1
    streamed = list(DataLoader(stream, batch_size=None))
    assert sum(len(a) for a, _ in streamed) == 4 * (BATCHES - 1)
    rows = sorted(tuple(r.flatten().tolist()) for a, _ in streamed for r in a)
    assert rows == sorted(tuple(r.flatten().tolist()) for t in kept(good) for r in t)


def test_a_dataloader_with_workers_reads_every_kept_row_of_a_damaged_store(good: Path, tmp_path: Path) -> None:
    path, _ = damaged(good, tmp_path, "data", "complete")
    with pytest.warns(StoreWarning, match=rf"batch {LOST} left out"):
        data = hookscope.StoreDataset(path, "0")
    read = torch.cat(list(DataLoader(data, batch_size=7, num_workers=2)))
    assert torch.equal(read, torch.cat(kept(good)))


def test_a_manifest_row_that_names_another_batch_costs_its_shard_never_gives_a_neighbours_rows(
    good: Path, tmp_path: Path
) -> None:
    """Site "0"'s row of batch 3 edited to say batch 2 (it passes every check alone): the shard's own header
    disagrees, so both batches its rows name are left out, and batch 2's place never holds batch 3's rows."""
    path = tmp_path / "renumbered"
    shutil.copytree(good, path)
    manifest = path / "manifest.json"
    flip(manifest, manifest.read_bytes().index(f'["0", "output", "out", {LOST}, 0'.encode()) + 23, 1)  # "3" -> "2"
    with pytest.warns(StoreWarning) as caught:
        data = hookscope.StoreDataset(path, "0")
    assert len(caught) == 1 and "batches 2..3 left out" in str(caught[0].message)
    assert len(data) == 4 * (BATCHES - 2) and data.batches == [0, 1, 4, 5, 6, 7, 8, 9]
    assert torch.equal(torch.cat(list(DataLoader(data, batch_size=6))), torch.cat(kept(good, lost=(2, LOST))))


def break_sites(root: Path, how: str) -> None:
    """The manifest's list of sites damaged: its key ("sites" -> "rites", one byte: the list is gone), a site's
    name ("2" -> "3", one byte), or the list emptied."""
    manifest = root / "manifest.json"
    data = manifest.read_bytes()
    if how == "dropped":
        flip(manifest, data.index(b'"sites"') + 1, 1)
    elif how == "renamed":
        flip(manifest, data.index(b'"name": "2"') + 9, 1)
    else:
        manifest.write_text(json.dumps({**json.loads(data), "sites": []}))


@pytest.mark.parametrize("how", ["dropped", "renamed", "emptied"])
def test_a_killed_stores_list_of_sites_is_checked_as_a_complete_ones(good: Path, tmp_path: Path, how: str) -> None:
    """Every shard holds both sites: a site the list lacks costs every shard, listed in run.damaged, as for
    the complete store with the same damage; never a site silently missing with its batches read as whole."""
    runs = {}
    for state in STATES:
        root = tmp_path / state
        shutil.copytree(good, root)
        if state == "interrupted":
            as_if_killed(root)
        break_sites(root, how)
        with pytest.warns(StoreWarning, match="must be a site the manifest lists"):
            runs[state] = hookscope.load(root)
    killed, complete = runs["interrupted"], runs["complete"]
    assert not killed.complete and complete.complete
    assert list(killed) == list(complete) == {"dropped": [], "renamed": ["0", "3"], "emptied": []}[how]
    assert set(killed.damaged) == set(complete.damaged) == {f"shards/{shard_of(good, b).name}" for b in range(BATCHES)}
    assert killed.lost == complete.lost and sorted(killed.lost) == list(range(BATCHES))
    with pytest.raises(DamagedShardError, match=rf"must be a site the manifest lists.*batch {LOST} was in it"):
        killed.batch(LOST)
