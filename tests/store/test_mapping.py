"""Files mapped end to end (``hookscope.store.mapping``): one tensor over their bytes, the files never changed, the
range given back; a stream over several shard files gathers each minibatch once, from that one tensor."""

from __future__ import annotations

import errno
import gc
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

import hookscope
from hookscope.errors import DamagedShardError
from hookscope.store import mapping
from tests.store.lm import TinyLM, expected, token_batches
from tests.store.test_addresses import _extract, _same, reference

pytestmark = pytest.mark.skipif(not mapping.AVAILABLE, reason="mmap at a chosen address: Linux and macOS")
PAGE = mapping.PAGE


def test_files_end_to_end_are_one_tensor_of_their_bytes(tmp_path: Path) -> None:
    floats = torch.arange(PAGE // 2, dtype=torch.float32).numpy().tobytes()  # two pages
    contents = [bytes(range(256)) * 20 + b"x", b"abc", floats, b"", b"tail"]
    paths = [tmp_path / f"f{n}" for n in range(len(contents))]
    for path, content in zip(paths, contents, strict=True):
        path.write_bytes(content)
    sizes = [len(c) for c in contents]
    at = mapping.starts(sizes)
    pages = [-(-size // PAGE) for size in sizes]  # by hand: each file from a page boundary
    assert at == [sum(pages[:n]) * PAGE for n in range(len(sizes) + 1)]
    joined = mapping.join(paths, sizes, torch.uint8)
    assert joined.shape == (at[-1],)
    for content, start in zip(contents, at[:-1], strict=True):
        assert bytes(joined[start : start + len(content)].numpy()) == content
    joined[at[2] : at[2] + 8] = 0  # copy-on-write: the file keeps its bytes
    assert paths[2].read_bytes() == contents[2]
    words = mapping.join(paths[2:3], sizes[2:3], torch.float32)  # another dtype: the same bytes, read as float32
    assert torch.equal(words, torch.arange(PAGE // 2, dtype=torch.float32))
    address = joined.data_ptr()
    del joined, words
    gc.collect()
    maps = Path("/proc/self/maps")
    if maps.exists():  # Linux: the range is given back once nothing holds the tensor
        assert f"{address:08x}-" not in maps.read_text()


def test_a_file_of_another_size_is_refused_and_the_range_given_back(tmp_path: Path) -> None:
    paths = [tmp_path / "a", tmp_path / "b"]
    for path in paths:
        path.write_bytes(b"12345678")
    with pytest.raises(OSError, match="9 when the store was opened") as raised:
        mapping.join(paths, [8, 9], torch.uint8)
    assert raised.value.filename == str(paths[1])
    with pytest.raises(FileNotFoundError, match="missing"):
        mapping.join([tmp_path / "missing"], [8], torch.uint8)


def test_a_minibatch_across_files_is_one_gather(tmp_path: Path, monkeypatch: Any) -> None:
    model = TinyLM()
    run = _extract(tmp_path / "s", model, layout="tokens")
    assert len(run.manifest["shards"]) > 2
    want = expected(model, token_batches(12), "mlp", tokens=True)
    counts = [int(b["attention_mask"].sum()) for b in token_batches(12)]
    calls = []
    select = torch.index_select

    def counted(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(args[0].shape[1] if args[0].dim() == 2 else 0)  # gathers of rows (not of codes)
        return select(*args, **kwargs)

    stream = hookscope.StoreStream(run.path, "mlp", by="tokens", minibatch=4, max_memory=90, seed=5)
    monkeypatch.setattr(torch, "index_select", counted)
    got = list(stream)
    monkeypatch.undo()
    _same(got, reference(want, counts, 12, seed=5, epoch=0, minibatch=4, limit=90))
    assert len([c for c in calls if c]) == len(got)  # one gather of rows a minibatch, wherever its items lie


def _refused(*args: Any) -> torch.Tensor:
    raise OSError(errno.ENOMEM, "Cannot allocate memory")


@pytest.mark.parametrize("why", ["not available", "refused"])
def test_files_mapped_one_by_one_keep_the_documented_order(tmp_path: Path, monkeypatch: Any, why: str) -> None:
    model = TinyLM()
    run = _extract(tmp_path / "s", model)
    want = expected(model, token_batches(12), "mlp", tokens=True)
    counts = [int(b["attention_mask"].sum()) for b in token_batches(12)]
    if why == "not available":  # as on Windows: a view per file, a patch-in per other file
        monkeypatch.setattr(mapping, "AVAILABLE", False)
    else:  # more files than a process may map, say: the same, quietly
        monkeypatch.setattr(mapping, "join", _refused)
    stream = hookscope.StoreStream(run.path, "mlp", by="tokens", minibatch=4, max_memory=90, seed=5)
    _same(list(stream), reference(want, counts, 12, seed=5, epoch=0, minibatch=4, limit=90))
    data = hookscope.StoreDataset(run.path, "mlp", by="tokens")
    index = torch.randperm(len(want), generator=torch.Generator().manual_seed(0))
    assert torch.equal(data[index], want[index])


def test_a_shard_changed_after_opening_names_itself_where_a_worker_maps_it(tmp_path: Path) -> None:
    run = _extract(tmp_path / "s", TinyLM(), layout="tokens")
    stream = hookscope.StoreStream(run.path, "mlp", by="tokens", minibatch=4, max_memory=90, seed=5)
    shard = run.manifest["shards"][1]["file"]
    with (run.path / shard).open("ab") as file:
        file.write(b"\0" * 8)
    assert len(list(stream)) > 1  # this process mapped the files when the stream was made
    sent = pickle.loads(pickle.dumps(stream))  # as to a spawned DataLoader worker: it maps them again
    with pytest.raises(DamagedShardError, match=f"shard {shard} is damaged: .* bytes, .* when the store was opened"):
        list(sent)


def test_a_sequence_stepped_through_reads_its_calls_from_the_joined_files(tmp_path: Path) -> None:
    from torch import nn

    from hookscope.serving.sink import RequestSink
    from tests.serving.test_sink import LENGTHS, SITES, joined, request
    from tests.serving.test_sink import model as two_layers

    options = {"out": str(tmp_path / "s"), "resume": False, "flush_every": None, "shard_size": 64}
    sink = RequestSink(two_layers(), [(s, nn.Identity()) for s in SITES], ("output",), SITES, options)
    for name in ("1", "0", "2"):
        records, tokens = request(name)
        sink.put(name, records, tokens, LENGTHS[name][0])
    sink.close(ok=True)
    assert len(hookscope.load(tmp_path / "s").manifest["shards"]) > 2  # a request's calls in several files
    data = hookscope.StoreDataset(tmp_path / "s", "layers.1", key="residual", by="tokens")
    expected = torch.cat([joined(name, "layers.1") for name in ("1", "0", "2")])  # batch order, calls in order
    shuffled = torch.randperm(len(expected), generator=torch.Generator().manual_seed(0))
    assert torch.equal(data[shuffled], expected[shuffled])
