"""The one-gather read of ``StoreStream`` and ``StoreDataset`` (``hookscope.store.addresses``) yields what the shuffle
buffer has always yielded: the same tokens in the same order, bit for bit, checked against a reference written
here (the documented buffer, drawn over the model's outputs computed here), across shards, sites, padding,
dtypes, ranks and ``DataLoader`` workers."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.utils.data import DataLoader

import hookscope
from tests.store.lm import TinyLM, expected, token_batches


def _generator(*seed: int) -> torch.Generator:
    """The stream's seeding: the batch order from (seed, epoch), each rank's shuffle from (seed, epoch, slot + 1)."""
    return torch.Generator().manual_seed(hash(seed) & 0x7FFF_FFFF_FFFF_FFFF)


def reference(tokens: Tensor, counts: list[int], item_bytes: int, *, seed: int, epoch: int, slot: int = 0,
              slots: int = 1, minibatch: int, limit: int) -> list[Tensor]:  # fmt: skip
    """The documented stream: whole batches in a seeded order, this slot's share of them, held in a buffer of
    ``limit`` bytes; when full, a random half of it (whole minibatches) is yielded, the rest kept; at the end,
    all of it. ``tokens``: every item of the store in order (the oracle), ``counts``: items per batch."""
    starts = [0, *torch.tensor(counts).cumsum(0).tolist()]
    order = torch.randperm(len(counts), generator=_generator(seed, epoch))
    shuffle, held, out = _generator(seed, epoch, slot + 1), torch.empty(0, dtype=torch.long), []

    def draw(half: bool) -> None:
        nonlocal held
        if not len(held):
            return
        perm = torch.randperm(len(held), generator=shuffle)
        taken = len(held) // 2 if half else len(held)
        taken -= taken % minibatch if half and taken >= minibatch else 0
        drawn, held = held[perm[:taken]], held[perm[taken:]]
        out.extend(tokens[drawn].split(minibatch))

    for p in order[slot::slots].tolist():
        held = torch.cat([held, torch.arange(starts[p], starts[p + 1])])
        if len(held) * item_bytes >= limit and len(held) >= 2:
            draw(True)
    draw(False)
    return out


def _extract(path: Path, model: torch.nn.Module, n: int = 12, **options: Any) -> hookscope.Run:
    return hookscope.extract(model, token_batches(n), out=path, select=["embed", "mlp"], progress=False,
                             shard_size=300, **options)  # fmt: skip


def _same(got: list[Any], want: list[Tensor]) -> None:
    assert len(got) == len(want)
    for x, y in zip(got, want, strict=True):
        assert x.dtype == y.dtype and torch.equal(x, y)


@pytest.mark.parametrize("layout", ["rows", "tokens"])
def test_the_stream_yields_the_documented_order_bit_for_bit(tmp_path: Path, layout: str) -> None:
    model = TinyLM()
    run = _extract(tmp_path / "s", model, layout=layout)
    assert len(run.manifest["shards"]) > 2  # minibatches drawn across files
    want = expected(model, token_batches(12), "mlp", tokens=True)
    counts = [int(b["attention_mask"].sum()) for b in token_batches(12)]  # padding left out
    for epoch in (0, 3):
        stream = hookscope.StoreStream(run.path, "mlp", by="tokens", minibatch=4, max_memory=90, seed=5)
        stream.set_epoch(epoch)
        _same(list(stream), reference(want, counts, 12, seed=5, epoch=epoch, minibatch=4, limit=90))


def test_two_sites_ranks_and_workers_keep_the_documented_order(tmp_path: Path, monkeypatch: Any) -> None:
    model = TinyLM()
    run = _extract(tmp_path / "s", model)
    embed, mlp = (expected(model, token_batches(12), site, tokens=True) for site in ("embed", "mlp"))
    counts = [int(b["attention_mask"].sum()) for b in token_batches(12)]
    options = {"seed": 1, "epoch": 2, "minibatch": 3, "limit": 200, "slots": 2}
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        stream = hookscope.StoreStream(run.path, ["embed", "mlp"], by="tokens", minibatch=3, max_memory=200, seed=1)
        stream.set_epoch(2)
        got = list(stream)
        _same([x for x, _ in got], reference(embed, counts, 28, slot=rank, **options))  # 4 + 3 float32 a token
        _same([y for _, y in got], reference(mlp, counts, 28, slot=rank, **options))
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    stream = hookscope.StoreStream(run.path, "mlp", by="tokens", minibatch=3, max_memory=200, seed=1)
    stream.set_epoch(2)
    each = [reference(mlp, counts, 12, slot=w, **options) for w in (0, 1)]  # a DataLoader takes turns
    turns = [batch for pair in zip(*each, strict=False) for batch in pair]
    turns += each[0][len(each[1]) :] + each[1][len(each[0]) :]
    _same(list(DataLoader(stream, batch_size=None, num_workers=2)), turns)


def test_half_precision_stays_half_and_single_items_keep_their_order(tmp_path: Path) -> None:
    model = TinyLM().to(torch.bfloat16)
    run = _extract(tmp_path / "s", model, layout="tokens")
    want = expected(model, token_batches(12), "mlp", tokens=True)
    assert want.dtype == torch.bfloat16
    counts = [int(b["attention_mask"].sum()) for b in token_batches(12)]
    stream = hookscope.StoreStream(run.path, "mlp", by="tokens", max_memory=50, seed=2)
    got = list(stream)
    assert got[0].shape == (3,)
    _same([x[None] for x in got], reference(want, counts, 6, seed=2, epoch=0, minibatch=1, limit=50))


def test_random_minibatches_and_rows_are_read_exactly(tmp_path: Path) -> None:
    model = TinyLM()
    rows, tokens = _extract(tmp_path / "r", model), _extract(tmp_path / "t", model, layout="tokens")
    want = expected(model, token_batches(12), "mlp", tokens=True)
    index = torch.randperm(len(want), generator=torch.Generator().manual_seed(0))
    index[:5] -= len(want)  # negative ones count from the end
    for path in (rows.path, tokens.path):
        data = hookscope.StoreDataset(path, "mlp", by="tokens")
        assert torch.equal(data[index], want[index]) and torch.equal(data[7], want[7])
    by_rows = hookscope.StoreDataset(rows.path, ["embed", "mlp"])
    x, y = by_rows[[23, 0, 11]]
    assert torch.equal(y, expected(model, token_batches(12), "mlp", tokens=False)[[23, 0, 11]])
    assert x.shape == (3, 5, 4)


def _misalign(path: Path) -> None:
    """Every shard's data moved one byte on (a header one space longer), as a file written elsewhere may be."""
    manifest = json.loads((path / "manifest.json").read_text())
    for shard in manifest["shards"]:
        raw = (path / shard["file"]).read_bytes()
        (length,) = struct.unpack("<Q", raw[:8])
        moved = struct.pack("<Q", length + 1) + raw[8 : 8 + length] + b" " + raw[8 + length :]
        (path / shard["file"]).write_bytes(moved)
        shard["bytes"], shard["data_start"] = shard["bytes"] + 1, shard["data_start"] + 1
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_arrays_not_aligned_to_their_dtype_are_read_as_copies(tmp_path: Path) -> None:
    model = TinyLM()
    run = _extract(tmp_path / "s", model, layout="tokens")
    _misalign(run.path)
    want = expected(model, token_batches(12), "mlp", tokens=True)
    counts = [int(b["attention_mask"].sum()) for b in token_batches(12)]
    data = hookscope.StoreDataset(run.path, "mlp", by="tokens")
    assert torch.equal(data[list(range(len(want)))], want)
    stream = hookscope.StoreStream(run.path, "mlp", by="tokens", minibatch=4, max_memory=90, seed=5)
    _same(list(stream), reference(want, counts, 12, seed=5, epoch=0, minibatch=4, limit=90))


def test_a_minibatchs_memory_comes_back_only_when_nothing_holds_it(tmp_path: Path) -> None:
    model = TinyLM()
    run = _extract(tmp_path / "s", model, n=40)
    want = expected(model, token_batches(40), "mlp", tokens=True)
    counts = [int(b["attention_mask"].sum()) for b in token_batches(40)]
    stream = hookscope.StoreStream(run.path, "mlp", by="tokens", minibatch=4, max_memory=200, seed=3)
    wanted = reference(want, counts, 12, seed=3, epoch=0, minibatch=4, limit=200)
    places = {x.data_ptr() for x in stream}  # each dropped as the next comes: their memory is taken again
    assert len(wanted) > 30 and len(places) <= 4
    views = [x[1:] for x in stream]  # a view holds its minibatch's memory, a NumPy array too
    assert all(torch.equal(v, w[1:]) for v, w in zip(views, wanted, strict=True))
    arrays = [x.numpy() for x in stream]
    assert all(torch.equal(torch.from_numpy(a), w) for a, w in zip(arrays, wanted, strict=True))


def test_threads_reading_one_dataset_get_their_own_memory(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    model = TinyLM()
    run = _extract(tmp_path / "s", model, n=40, layout="tokens")
    want = expected(model, token_batches(40), "mlp", tokens=True)
    data = hookscope.StoreDataset(run.path, "mlp", by="tokens")
    asked = [torch.randint(len(want), (64,), generator=torch.Generator().manual_seed(i)) for i in range(200)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(data.__getitem__, asked))
    assert all(torch.equal(x, want[i]) for x, i in zip(got, asked, strict=True))
