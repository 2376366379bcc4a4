"""Stores other tools read: tensors named site/kind/key/call/batch, the token-major layout (with resume), and
StoreDataset / StoreStream over one or several stores, checked against the model's outputs computed here."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import safetensors
import torch
from torch import nn
from torch.utils.data import DataLoader

import hookscope
from hookscope.errors import OptionError
from tests.store.lm import TinyLM, expected, token_batches

V1 = Path(__file__).parent / "data" / "v1.hookscope"  # written by the code before format version 2


def _extract(tmp_path: Path, name: str, model: nn.Module | None = None, **options: Any) -> hookscope.Run:
    model = model or TinyLM()
    return hookscope.extract(model, token_batches(), out=tmp_path / name, select=["embed", "mlp"], progress=False,
                             **options)  # fmt: skip


def test_a_version_1_store_reads_as_before() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(11, 4), nn.Linear(4, 3))  # the model that wrote the fixture
    batches = [torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    run = hookscope.load(V1)
    assert run.manifest["version"] == 1 and run.manifest["tensors"][0][7] == "b0.0"  # the old names
    with torch.no_grad():
        want = torch.cat([model(b) for b in batches])
    assert torch.equal(torch.cat([c.output for c in run["1"].calls]), want)
    assert torch.equal(hookscope.StoreDataset(V1, "1")[list(range(6))], want)


def test_shard_tensors_are_named_site_kind_key_call_batch(tmp_path: Path) -> None:
    model = TinyLM()
    run = _extract(tmp_path, "acts.hookscope", model)
    assert run.manifest["version"] == 2
    seen = {}
    for shard in (tmp_path / "acts.hookscope" / "shards").glob("*.safetensors"):  # a plain safetensors user
        with safetensors.safe_open(str(shard), "pt") as f:
            seen.update({name: f.get_tensor(name) for name in f.keys()})  # noqa: SIM118 (safe_open is no dict)
    batches = token_batches()
    for b, batch in enumerate(batches):
        assert torch.equal(seen[f"mlp/output/out/call0/b{b}"], expected(model, [batch], "mlp", tokens=False))
        assert torch.equal(seen[f"embed/output/out/call0/b{b}"], expected(model, [batch], "embed", tokens=False))
        assert torch.equal(seen[f"inputs/input_ids/b{b}"], batch["input_ids"])
        assert torch.equal(seen[f"inputs/attention_mask/b{b}"], batch["attention_mask"])
    assert len(seen) == 4 * len(batches)


def test_the_token_layout_holds_every_token_less_padding(tmp_path: Path) -> None:
    model = TinyLM()
    rows = _extract(tmp_path, "rows.hookscope", model)
    tokens = _extract(tmp_path, "tokens.hookscope", model, layout="tokens", shard_size=200)
    assert len(tokens.manifest["shards"]) > 1 and tokens.config["layout"] == "tokens"
    want = expected(model, token_batches(), "mlp", tokens=True)
    by_tokens = hookscope.StoreDataset(tokens.path, "mlp", by="tokens")
    assert len(by_tokens) == len(want) == sum(int(b["attention_mask"].sum()) for b in token_batches())
    assert torch.equal(by_tokens[list(range(len(want)))], want)
    assert torch.equal(torch.cat([call.output for call in tokens["mlp"].calls]), want)  # load: a call per shard
    assert "mlp" in tokens.describe()
    assert torch.equal(hookscope.StoreDataset(rows.path, "mlp", by="tokens")[torch.arange(len(want))], want)
    ids = []
    for shard in sorted((tokens.path / "shards").glob("*.safetensors")):
        with safetensors.safe_open(str(shard), "pt") as f:
            ids += [f.get_tensor(n) for n in f.keys() if n.startswith("inputs/token_ids/")]  # noqa: SIM118
    assert torch.equal(torch.cat(ids), torch.cat([b["input_ids"][b["attention_mask"].bool()] for b in token_batches()]))


def test_the_token_layout_resumes_after_an_interruption(tmp_path: Path) -> None:
    model, batches = TinyLM(), token_batches()

    def failing() -> Iterator[dict[str, torch.Tensor]]:
        yield from batches[:2]
        raise RuntimeError("the data went away")

    with pytest.raises(RuntimeError, match="went away"):
        hookscope.extract(model, failing(), out=tmp_path / "t.hookscope", select="mlp", layout="tokens",
                          progress=False, flush_every=None)  # fmt: skip
    assert hookscope.load(tmp_path / "t.hookscope").batches == [0, 1]
    with pytest.raises(hookscope.StoreError, match="layout"):
        hookscope.extract(model, batches, out=tmp_path / "t.hookscope", select="mlp", resume=True, progress=False)
    run = hookscope.extract(model, batches, out=tmp_path / "t.hookscope", select="mlp", layout="tokens",
                            resume=True, progress=False)  # fmt: skip
    assert run.batches == [0, 1, 2, 3]
    data = hookscope.StoreDataset(run.path, "mlp", by="tokens")
    assert torch.equal(data[list(range(len(data)))], expected(model, batches, "mlp", tokens=True))


def test_two_stores_read_together_aligned_by_batch(tmp_path: Path) -> None:
    one, two = TinyLM(seed=0), TinyLM(seed=1)
    a = _extract(tmp_path, "a.hookscope", one)
    b = _extract(tmp_path, "b.hookscope", two, layout="tokens")
    pair = hookscope.StoreDataset([a.path, b.path], "mlp", by="tokens")
    x, y = pair[[5, 0, 17]]
    assert torch.equal(x, expected(one, token_batches(), "mlp", tokens=True)[[5, 0, 17]])
    assert torch.equal(y, expected(two, token_batches(), "mlp", tokens=True)[[5, 0, 17]])
    rows = hookscope.StoreDataset(a.path, ["embed", "mlp"])  # two sites of one store, by rows
    assert [t.shape for t in rows[3]] == [(5, 4), (5, 3)]
    with pytest.raises(OptionError, match="by='tokens'"):
        hookscope.StoreDataset(b.path, "mlp", by="rows")


def test_a_dataloader_with_two_workers_reads_every_token_once(tmp_path: Path) -> None:
    model = TinyLM()
    run = _extract(tmp_path, "acts.hookscope", model)
    data = hookscope.StoreDataset(run.path, "mlp", by="tokens")
    loader = DataLoader(data, batch_size=4, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(0))
    got = torch.cat(list(loader))
    assert _sorted(got).equal(_sorted(expected(model, token_batches(), "mlp", tokens=True)))


def test_the_stream_is_seeded_per_epoch_and_disjoint_across_ranks(tmp_path: Path, monkeypatch: Any) -> None:
    model = TinyLM()
    run = _extract(tmp_path, "acts.hookscope", model)
    want = expected(model, token_batches(), "mlp", tokens=True)
    epochs = []
    for epoch in (0, 1):
        parts = []
        for rank in (0, 1):
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("WORLD_SIZE", "2")
            stream = hookscope.StoreStream(run.path, "mlp", by="tokens", minibatch=3, max_memory=60, seed=7)
            stream.set_epoch(epoch)
            parts.append(torch.cat(list(stream)))
            assert torch.equal(torch.cat(list(stream)), parts[-1])  # seeded: the same epoch, the same order
        assert _sorted(torch.cat(parts)).equal(_sorted(want))  # the ranks' shares: disjoint, every token once
        epochs.append(torch.cat(parts))
    assert not torch.equal(*epochs)  # another epoch, another order
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    stream = hookscope.StoreStream(run.path, "mlp", by="tokens", minibatch=3, max_memory=60, seed=7)
    got = torch.cat(list(DataLoader(stream, batch_size=None, num_workers=2)))
    assert _sorted(got).equal(_sorted(want))


def _sorted(rows: torch.Tensor) -> torch.Tensor:
    """Rows in a canonical order, to compare two sets of rows."""
    return torch.stack(sorted(rows, key=lambda r: r.tolist()))


KILLED_JOB = """
import sys, time, torch, hookscope
from tests.store.lm import TinyLM, token_batches

def forward(model, batch):
    time.sleep(0.05)
    return model(**batch)

hookscope.extract(TinyLM(), token_batches(200), out=sys.argv[1], select="mlp", layout="tokens", progress=False,
                  forward=forward, flush_every=0.1, shard_size=1, max_memory="1MB")
"""


def test_a_killed_token_major_run_keeps_whole_batches_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "killed.hookscope"
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen([sys.executable, "-c", KILLED_JOB, str(out)], cwd=root)
    try:
        deadline = time.monotonic() + 120
        while len(list((out / "shards").glob("*.safetensors"))) < 3:
            assert process.poll() is None and time.monotonic() < deadline, "the job ended or hung before the kill"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=60)
    model, batches = TinyLM(), token_batches(200)
    partial = hookscope.load(out)
    kept = partial.batches
    assert kept == list(range(len(kept))) and 3 <= len(kept) < 200
    data = hookscope.StoreDataset(out, "mlp", by="tokens")
    assert torch.equal(data[list(range(len(data)))], expected(model, batches[: len(kept)], "mlp", tokens=True))
    run = hookscope.extract(model, batches, out=out, select="mlp", layout="tokens", resume=True, progress=False)
    assert run.batches == list(range(200))
    data = hookscope.StoreDataset(out, "mlp", by="tokens")
    assert torch.equal(data[list(range(len(data)))], expected(model, batches, "mlp", tokens=True))


def test_wrong_options_say_what_to_pass(tmp_path: Path) -> None:
    model, batches = TinyLM(), token_batches(1)
    with pytest.raises(OptionError, match="'rows', 'tokens'"):
        hookscope.extract(model, batches, out=tmp_path / "a", select="mlp", layout="token", progress=False)
    with pytest.raises(OptionError, match="stats_only"):
        hookscope.extract(model, batches, out=tmp_path / "b", select="mlp", layout="tokens", stats_only=True,
                          progress=False)  # fmt: skip
    conv = nn.Sequential(nn.Conv2d(1, 2, 3))
    with pytest.raises(OptionError, match=r"\(2, 2, 3, 3\): use layout='rows'"):
        hookscope.extract(conv, [torch.randn(2, 1, 5, 5)], out=tmp_path / "c", layout="tokens", progress=False)
    run = _extract(tmp_path, "d")
    with pytest.raises(hookscope.SelectionError, match="matched no site"):
        hookscope.StoreDataset(run.path, "blocks.*")
    with pytest.raises(OptionError, match="by must be"):
        hookscope.StoreDataset(run.path, "mlp", by="token")


def test_saved_captures_name_their_tensors_too(tmp_path: Path) -> None:
    model, batch = TinyLM(), token_batches(1)[0]
    with hookscope.capture(model, ["embed", "mlp"]) as cap:
        model(**batch)
    hookscope.save(cap, tmp_path / "cap.hookscope")
    (shard,) = (tmp_path / "cap.hookscope" / "shards").glob("*.safetensors")
    with safetensors.safe_open(str(shard), "pt") as f:
        assert sorted(f.keys()) == ["embed/output/out/call0/b0", "mlp/output/out/call0/b0"]
        assert torch.equal(f.get_tensor("mlp/output/out/call0/b0"), cap["mlp"].output)


def test_the_stream_holds_at_most_max_memory_plus_a_batch(tmp_path: Path, monkeypatch: Any) -> None:
    from hookscope.store import dataset

    run = _extract(tmp_path, "acts.hookscope")
    held = []
    add = dataset._Window.add

    def counted(window: Any, batch: int) -> None:
        add(window, batch)
        held.append(window.count * window.per_item)

    monkeypatch.setattr(dataset._Window, "add", counted)
    batch_bytes = 2 * 5 * 3 * 4  # a batch: 2 rows of 5 tokens of 3 float32
    stream = hookscope.StoreStream(run.path, "mlp", by="tokens", minibatch=2, max_memory=100)
    assert len(torch.cat(list(stream))) == len(hookscope.StoreDataset(run.path, "mlp", by="tokens"))
    assert held and max(held) <= 100 + batch_bytes
