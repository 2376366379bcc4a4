"""Nothing read from a damaged store escapes as anything but a hookscope error, or as a value no checksum vouched for.

A seeded loop mutates copies of real small stores (saved captures, plain and with nested
outputs, an extracted store complete and interrupted, a statistics store, a watch store): an
edit of one field of the manifest or of a shard's header (a value replaced by another type, a
number out of range, a key renamed or removed, a list item dropped or doubled, nesting past any
limit), one damaged byte anywhere, or a truncated file. Then every read is made: ``load``, every
record of every site and batch, the statistics, the histories, ``hookscope info``, and a resume
of the extracted stores. Each must return or raise a ``HookscopeError``; every tensor returned
must equal, bit for bit, what the unmodified store gave under the same (site, kind, key, batch,
call): the oracle.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.cli.parser import build_parser
from hookscope.core.tree import flatten
from hookscope.errors import HookscopeError, HookscopeWarning
from hookscope.store.extract import extract
from tests.jobs import images, small_net

Values = dict[tuple[Any, ...], torch.Tensor]
CASES = 300  # in CI; the slow run makes FUZZ_SLOW
FUZZ_SLOW = 3000
JUNK: list[Any] = [None, -1, 0, 2**40, "catch", "", 1.5, True, [], {}, [0, -3], ["x"], {"t": 1}, "../x"]


def small_extract(out: Path) -> hookscope.Run:
    return extract(small_net(), images(3, 6), out=out, select=["0", "2"], shard_size=1, progress=False)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Values]]:
    """Each kind of store, and what every read of it gives when nothing is damaged."""
    root = tmp_path_factory.mktemp("fuzz")
    model = small_net()
    with hookscope.capture(model, ["0", "2"], kinds=("input", "output")) as cap:
        model(next(images(1, 6)))
    hookscope.save(cap, root / "saved")
    torch.manual_seed(0)
    structured = nn.Sequential(nn.LSTM(3, 4, batch_first=True), Pair())  # a nested tuple, then a dict
    with hookscope.capture(structured, ["0", "1"]) as cap:
        structured(torch.randn(2, 5, 3))
    hookscope.save(cap, root / "structured")
    extract(small_net(), images(3, 6), out=root / "stats", select=["0", "2"], stats_only=True, per_channel=True,
            progress=False)  # fmt: skip
    small_extract(root / "extracted")
    shutil.copytree(root / "extracted", root / "killed")
    as_if_killed(root / "killed")
    watch_store(root / "watched")
    names = ("saved", "structured", "extracted", "killed", "watched", "stats")
    return {name: (root / name, read_everything(root / name)) for name in names}


class Pair(nn.Module):
    """Takes an LSTM's (output, (h, c)); returns a dict holding a tensor, a tuple and a plain number."""

    def forward(self, out: tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]) -> dict[str, Any]:
        return {"out": out[0] * 2, "state": (out[1][0], 3)}


def watch_store(out: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookscope.watch(model, opt, every=1, out=out):
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(5, 4)).square().mean().backward()
            opt.step()


def as_if_killed(root: Path) -> None:
    """The manifest a killed run leaves: marked running, no index (the shards describe themselves)."""
    manifest = json.loads((root / "manifest.json").read_text())
    manifest.update(status="running", batches=[], shards=[], tensors=[], layouts={})
    (root / "manifest.json").write_text(json.dumps(manifest))


def read_everything(path: Path) -> Values:
    """Every tensor every read gives: records by batch (checked against the records by site), statistics,
    histories; and what ``hookscope info`` prints."""
    values: Values = {}
    run = hookscope.load(path)
    for site in run:  # reading every site finds every damaged shard
        run[site]
    for batch in run.batches:
        for site, record in run.batch(batch).items():
            values.update(tensors_of(record, ("batch", batch, site)))
    for site in run:
        by_batch = [dict(tensors_of(run.batch(b)[site], ())) for b in run.batches]
        whole = dict(tensors_of(run[site], ()))
        assert len(whole) == sum(map(len, by_batch)), f"{site}: its record and its batches hold other tensors"
    for name, history in run.histories().items():
        values[("history", name)] = history.rows
    for label, stats in run.statistics().items():
        values.update({("stats", *label, n): t for n, t in stats.to_tensors().items()})
    repr(run), run.describe(), run.contents(), run.alerts, run.rows
    args = build_parser().parse_args(["info", str(path)])
    with contextlib.redirect_stdout(io.StringIO()):
        args.run(args)
    return values


def tensors_of(record: hookscope.Record, where: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], torch.Tensor]]:
    for call in record.calls:
        for kind, by_key in call.tensors.items():
            for key, tensor in by_key.items():
                yield (*where, call.index, kind, key), tensor
        for kind in call.tensors:
            with contextlib.suppress(HookscopeError):  # rebuilt from its layout: a tuple, a tensor...
                for name, leaf in flatten(call.value_of(kind), kind):
                    yield (*where, call.index, kind, "value", name), leaf
    for name, grads in record.param_grads.items():
        for i, grad in enumerate(grads):
            yield (*where, "param_grad", name, i), grad


# -- mutations -------------------------------------------------------------------------------------
def mutate(root: Path, rng: random.Random) -> str:
    """One random damage to the store at ``root``; returns what it did."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    shards = [p for p in files if p.suffix == ".safetensors"]
    how = rng.choice(["manifest", "manifest", "header", "header", "meta", "catch", "byte", "truncate"])
    if how in ("header", "meta", "catch") and shards:
        return shard_edit(rng.choice(shards), how, rng)
    target = root / "manifest.json" if how == "manifest" else rng.choice(files)
    data = bytearray(target.read_bytes())
    if how == "manifest":
        target.write_text(dumps(edit(json.loads(data), rng)))
        return f"manifest edit of {target.name}"
    if how == "truncate" or not data:
        cut = rng.randrange(len(data) + 1)
        target.write_bytes(bytes(data[:cut]))
        return f"{target.name} cut to {cut} bytes"
    at = rng.randrange(len(data))
    data[at] ^= 1 << rng.randrange(8)
    target.write_bytes(bytes(data))
    return f"byte {at} of {target.name} flipped"


def shard_edit(path: Path, how: str, rng: random.Random) -> str:
    """Edit the safetensors header (``header``), the hookscope metadata in it (``meta``), or replace the
    word ``batch`` once (``catch``), and write the shard back around its unchanged data."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header, rest = json.loads(data[8 : 8 + length]), data[8 + length :]
    if how == "catch":
        text = json.dumps(header).replace("batch", "catch", 1)
        header = json.loads(text)
    elif how == "meta" and "hookscope" in header.get("__metadata__", {}):
        meta = json.loads(header["__metadata__"]["hookscope"])
        if rng.random() < 0.3:  # a shard as written before its index had a checksum: its names are not vouched for
            meta.pop("index_crc32", None)
            how = "unvouched meta"
        header["__metadata__"]["hookscope"] = dumps(edit(meta, rng))
    else:
        header = edit(header, rng)
    raw = dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + rest)
    return f"{how} edit of {path.name}"


def edit(document: Any, rng: random.Random) -> Any:
    """``document`` with one node (picked at random along a random path) replaced, dropped or renamed."""
    if not isinstance(document, (dict, list)) or not document or rng.random() < 0.15:
        return rng.choice([*JUNK, nested(rng.choice([50, 2000]))])
    keys = list(document) if isinstance(document, dict) else list(range(len(document)))
    key = rng.choice(keys)
    choice = rng.random()
    if choice < 0.1:  # drop it
        del document[key]
    elif choice < 0.17 and isinstance(document, dict):  # rename it
        document[str(key)[:-1] + "x"] = document.pop(key)
    elif choice < 0.22 and isinstance(document, list):  # double it
        document.insert(key, document[key])
    elif choice < 0.3 and isinstance(document[key], int) and not isinstance(document[key], bool):  # off by one
        document[key] += rng.choice([-1, 1, 8])
    else:
        document[key] = edit(document[key], rng)
    return document


def nested(depth: int) -> str:
    """A marker ``dumps`` writes as ``depth`` nested lists (too deep for ``json.dumps`` to write itself)."""
    return f"<deep {depth}>"


def dumps(document: Any) -> str:
    text = json.dumps(document)
    for depth in (50, 2000):
        text = text.replace(json.dumps(nested(depth)), "[" * depth + "0" + "]" * depth)
    return text


# -- the oracle ------------------------------------------------------------------------------------
def check_reads(path: Path, reference: Values, what: str) -> None:
    """Every read raises a HookscopeError or gives the reference's values (``what`` names the damage).

    A shard edited as if written before its index had a checksum ("unvouched") may hand out vouched
    bytes under edited names (nothing can tell), so there only the first half holds."""
    try:
        got = read_everything(path)
    except HookscopeError:
        return
    if "unvouched" in what:
        return
    for key, tensor in got.items():
        assert key in reference, f"{what}: a value the store never held: {key}"
        expected = reference[key]
        assert identical(tensor, expected), f"{what}: {key} differs from what the store held"


def identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and values, NaN where NaN (a watch's unmeasured statistics)."""
    return a.dtype == b.dtype and a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def check_resume(path: Path, reference: Values, what: str) -> None:
    """A resumed extraction either refuses with a HookscopeError or leaves a store whose reads pass
    ``check_reads`` (a damaged header is extracted again; damaged tensor bytes are found when read)."""
    try:
        small_extract_resumed(path)
    except HookscopeError:
        return
    check_reads(path, reference, what)


def small_extract_resumed(out: Path) -> None:
    extract(small_net(), images(3, 6), out=out, select=["0", "2"], shard_size=1, progress=False, resume=True)


def fuzz(stores: dict[str, tuple[Path, Values]], tmp_path: Path, cases: int, seed: int) -> None:
    rng = random.Random(seed)
    names = sorted(stores)
    for case in range(cases):
        name = names[case % len(names)]
        source, reference = stores[name]
        copy = tmp_path / f"case{case}"
        shutil.copytree(source, copy)
        what = f"case {case} ({name}): {mutate(copy, rng)}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", HookscopeWarning)  # any other warning stays an error
            check_reads(copy, reference, what)
            if name in ("extracted", "killed") and case % 12 < 2:
                check_resume(copy, stores["extracted"][1], what)
        shutil.rmtree(copy)


def test_damaged_stores_raise_only_hookscope_errors_and_give_only_vouched_values(
    stores: dict[str, tuple[Path, Values]], tmp_path: Path
) -> None:
    fuzz(stores, tmp_path, CASES, seed=20261204)


@pytest.mark.slow
def test_damaged_stores_many_more_cases(stores: dict[str, tuple[Path, Values]], tmp_path: Path) -> None:
    fuzz(stores, tmp_path, FUZZ_SLOW, seed=7)


def test_one_changed_byte_in_a_shard_header_of_a_killed_run_costs_that_shard_only(
    stores: dict[str, tuple[Path, Values]], tmp_path: Path
) -> None:
    """``"batch"`` -> ``"catch"`` in one shard's header: its batch is left out, the others read, resume mends it."""
    copy = tmp_path / "killed"
    shutil.copytree(stores["killed"][0], copy)
    shard = sorted((copy / "shards").glob("*.safetensors"))[1]
    data = shard.read_bytes()
    at = data.index(b"batch", 8)
    shard.write_bytes(data[:at] + b"c" + data[at + 1 :])
    with pytest.warns(hookscope.StoreWarning, match=rf"{shard.name} is damaged"):
        run = hookscope.load(copy)
    assert len(run.batches) == 2 and list(run.damaged) == [f"shards/{shard.name}"]
    reference = stores["extracted"][1]
    for batch in run.batches:
        for site, record in run.batch(batch).items():
            for key, tensor in tensors_of(record, ("batch", batch, site)):
                assert identical(tensor, reference[key]), key
    with pytest.warns(hookscope.StoreWarning, match="moved 1 damaged file"):
        small_extract_resumed(copy)
    assert set(read_everything(copy)) == set(stores["extracted"][1])
