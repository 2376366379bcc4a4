"""A vLLM capture's store without vLLM: ``RequestSink`` fed the records a worker builds (call 0 a request's
prefill rows, then one row per decode step), read back by ``load``, ``StoreDataset`` and the datasets export.

The oracle is each request's calls joined in call order (what ``LLMCapture.sequence`` returns).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope
from hookscope.core.call import Call
from hookscope.core.records import Record
from hookscope.serving.sink import RequestSink, prompt_digest
from hookscope.store.format import read_manifest, write_manifest

SITES = ["layers.0", "layers.1"]
LENGTHS = {"0": (5, 4), "1": (2, 1), "2": (3, 6)}  # request -> (prompt tokens, calls: the prefill, then decodes)


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.ModuleDict({"0": nn.Linear(4, 4), "1": nn.Linear(4, 4)}))


def request(name: str) -> tuple[dict[str, Record], torch.Tensor]:
    """A request's records as the worker builds them, and the token ids it fed (its prompt, then each fed token)."""
    prompt, calls = LENGTHS[name]
    gen = torch.Generator().manual_seed(int(name))
    records = {}
    for site in SITES:
        record = Record(site, "LlamaDecoderLayer", ("output",))
        for k in range(calls):
            rows = prompt if k == 0 else 1
            hidden, residual = torch.randn(rows, 4, generator=gen), torch.randn(rows, 4, generator=gen)
            tensors = {"residual": hidden + residual, "out[0]": hidden, "out[1]": residual}
            record.add_call(Call(site, k, tensors={"output": tensors}))
        records[site] = record
    tokens = torch.randint(3, 200, (prompt + calls - 1,), generator=gen)
    return records, tokens


def write(out: Path, names: list[str], *, resume: bool = False) -> RequestSink:
    sink = RequestSink(model(), [(s, nn.Identity()) for s in SITES], ("output",), SITES,
                       {"out": str(out), "resume": resume, "flush_every": None})  # fmt: skip
    for name in names:
        records, tokens = request(name)
        sink.put(name, records, tokens, LENGTHS[name][0])
    sink.close(ok=True)
    return sink


def joined(name: str, site: str, key: str = "residual") -> torch.Tensor:
    return torch.cat([c.tensors["output"][key] for c in request(name)[0][site].calls])


def test_each_batch_says_which_request_it_is(tmp_path: Path) -> None:
    sink = write(tmp_path / "s", ["1", "0", "2"])
    assert sink.batches == {"1": 0, "0": 1, "2": 2}
    run = hookscope.load(tmp_path / "s")
    rows = {b["request"]: b for b in run.manifest["batches"]}
    for name, (prompt, calls) in LENGTHS.items():
        tokens = request(name)[1]
        assert rows[name]["prompt"] == prompt
        assert rows[name]["tokens"] == prompt + calls - 1 == len(tokens)
        assert rows[name]["calls"] == dict.fromkeys(SITES, calls)
        assert rows[name]["prompt_sha256"] == prompt_digest(tokens[:prompt].tolist())
        stored = run.batch(rows[name]["index"])["layers.1"]
        assert [c.get("output", "residual").shape[0] for c in stored.calls] == [prompt] + [1] * (calls - 1)
    import hashlib

    assert prompt_digest([1, 5, 6]) == hashlib.sha256(b"1 5 6").hexdigest()  # the documented digest


def test_store_dataset_gives_every_token_of_each_request_once_in_order(tmp_path: Path) -> None:
    write(tmp_path / "s", ["1", "0", "2"])
    for site, key in (("layers.1", "residual"), ("layers.0", "out[1]")):
        expected = torch.cat([joined(name, site, key) for name in ("1", "0", "2")])  # batch order
        for by in ("rows", "tokens"):
            data = hookscope.StoreDataset(tmp_path / "s", site, key=key, by=by)
            assert len(data) == len(expected) == 5 + 2 + 3 + 3 + 0 + 5
            torch.testing.assert_close(data[torch.arange(len(data))], expected, atol=0, rtol=0)
            torch.testing.assert_close(torch.stack([data[i] for i in range(len(data))]), expected, atol=0, rtol=0)
            shuffled = torch.randperm(len(data), generator=torch.Generator().manual_seed(0))
            torch.testing.assert_close(data[shuffled], expected[shuffled], atol=0, rtol=0)
    both = hookscope.StoreDataset(tmp_path / "s", SITES)  # two sites: aligned token by token
    torch.testing.assert_close(both[7][0], torch.cat([joined(n, "layers.0") for n in ("1", "0", "2")])[7])
    stream = hookscope.StoreStream(tmp_path / "s", "layers.1", minibatch=4, seed=0)
    seen = torch.cat(list(stream))
    expected = torch.cat([joined(name, "layers.1") for name in ("1", "0", "2")])
    assert sorted(map(tuple, seen.tolist())) == sorted(map(tuple, expected.tolist()))  # each token once


def test_the_datasets_export_is_a_row_per_request_with_its_tokens(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    write(tmp_path / "s", ["1", "0", "2"])
    hookscope.export(tmp_path / "s", tmp_path / "hf", format="datasets", select="layers.1")
    table = datasets.load_from_disk(str(tmp_path / "hf")).with_format("torch")
    assert len(table) == 3
    for row, name in enumerate(("1", "0", "2")):
        torch.testing.assert_close(table[row]["layers.1"], joined(name, "layers.1"), atol=0, rtol=0)
        assert table[row]["token_ids"].tolist() == request(name)[1].tolist()


def test_resume_goes_on_numbering_and_skips_prompts_the_store_holds(tmp_path: Path) -> None:
    write(tmp_path / "s", ["0", "1"])
    with pytest.raises(hookscope.OutputExistsError, match="resume=True to continue it"):
        write(tmp_path / "s", ["2"])
    sink = write(tmp_path / "s", ["1", "2", "0", "2"], resume=True)
    assert sink.skipped == ["1", "0", "2"]  # held before, or written earlier in this block
    assert sink.batches == {"2": 2}
    run = hookscope.load(tmp_path / "s")
    assert run.complete and run.batches == [0, 1, 2]
    assert [b["request"] for b in run.manifest["batches"]] == ["0", "1", "2"]


def test_a_damaged_request_field_is_named(tmp_path: Path) -> None:
    write(tmp_path / "s", ["0"])
    manifest = read_manifest(tmp_path / "s")
    manifest["batches"][0]["calls"] = {"layers.0": "four"}
    write_manifest(tmp_path / "s", manifest)
    with pytest.raises(hookscope.StoreError, match=r"batches\[0\]\.calls must be site -> an integer >= 0"):
        hookscope.load(tmp_path / "s")


def test_a_request_is_one_index_row_per_site_and_key_and_reads_back_bit_for_bit(tmp_path: Path) -> None:
    write(tmp_path / "s", ["1", "0", "2"])
    manifest = read_manifest(tmp_path / "s")
    per_batch = Counter(row[manifest["tensor_columns"].index("batch")] for row in manifest["tensors"])
    assert per_batch == dict.fromkeys(range(3), len(SITES) * 3)  # sites x keys, not x calls
    run = hookscope.load(tmp_path / "s")
    for batch, name in enumerate(("1", "0", "2")):
        prompt, calls = LENGTHS[name]
        assert run.manifest["batches"][batch]["call_rows"] == [prompt] + [1] * (calls - 1)
        records = request(name)[0]
        for site in SITES:
            stored = run.batch(batch)[site].calls
            assert len(stored) == calls
            for put, got in zip(records[site].calls, stored, strict=True):
                for key, tensor in put.tensors["output"].items():
                    assert torch.equal(got.get("output", key), tensor)
    every = [c for name in ("1", "0", "2") for c in request(name)[0]["layers.0"].calls]
    stored = run["layers.0"].calls
    assert len(stored) == len(every) == 4 + 1 + 6
    assert all(torch.equal(got.get("output", "out[1]"), put.tensors["output"]["out[1]"])
               for put, got in zip(every, stored, strict=True))  # fmt: skip


def test_a_request_whose_sites_differ_in_rows_is_stored_call_by_call(tmp_path: Path) -> None:
    records, tokens = request("0")
    records["layers.1"].calls.pop()  # layers.1 ran one call fewer: the calls cannot share one call_rows
    sink = RequestSink(model(), [(s, nn.Identity()) for s in SITES], ("output",), SITES,
                       {"out": str(tmp_path / "s"), "flush_every": None})  # fmt: skip
    sink.put("0", records, tokens, 5)
    sink.close(ok=True)
    run = hookscope.load(tmp_path / "s")
    assert "call_rows" not in run.manifest["batches"][0]
    assert len(run.manifest["tensors"]) == (4 + 3) * 3
    for site in SITES:
        assert [c.get("output", "residual").tolist() for c in run[site].calls] == [
            c.tensors["output"]["residual"].tolist() for c in records[site].calls
        ]


def test_damaged_call_rows_are_named(tmp_path: Path) -> None:
    write(tmp_path / "s", ["0"])
    manifest = read_manifest(tmp_path / "s")
    manifest["batches"][0]["call_rows"] = [5, 1, 1]  # one call short of the four stored
    write_manifest(tmp_path / "s", manifest)
    with pytest.raises(hookscope.StoreError, match=r"batches\[0\]\.call_rows must be a list of 4 integers >= 0"):
        hookscope.load(tmp_path / "s")


def test_a_request_lost_with_a_damaged_shard_keeps_a_place_per_call(tmp_path: Path) -> None:
    sink = RequestSink(model(), [(s, nn.Identity()) for s in SITES], ("output",), SITES,
                       {"out": str(tmp_path / "s"), "flush_every": None, "shard_size": 1})  # fmt: skip
    for name in ("1", "0", "2"):  # a shard per request
        sink.put(name, *request(name)[:1], None, LENGTHS[name][0])
    sink.close(ok=True)
    run = hookscope.load(tmp_path / "s")
    second = run.manifest["shards"][1]["file"]
    (tmp_path / "s" / second).write_bytes((tmp_path / "s" / second).read_bytes()[:-8])  # request "0" truncated
    with pytest.warns(hookscope.StoreWarning, match="batch 1 left out"):
        stored = hookscope.load(tmp_path / "s")["layers.0"].calls
    assert len(stored) == 1 + 4 + 6  # request "0"'s four calls keep their places
    with pytest.raises(hookscope.DamagedShardError, match="batch 1"):
        stored[1]
    assert torch.equal(
        stored[5].get("output", "residual"), request("2")[0]["layers.0"].calls[0].tensors["output"]["residual"]
    )
