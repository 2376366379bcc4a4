"""export(store, out, format="datasets"): an HF datasets folder that datasets.load_from_disk and SAE Lens's
ActivationsStore read back equal to the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import hookscope
from hookscope.errors import OptionError, OutputExistsError
from tests.store.lm import TinyLM, expected, token_batches

datasets = pytest.importorskip("datasets")


def _store(tmp_path: Path, **options: object) -> hookscope.Run:
    return hookscope.extract(TinyLM(), token_batches(), out=tmp_path / "acts.hookscope", select=["embed", "mlp"],
                             progress=False, **options)  # fmt: skip


def test_the_export_opens_with_load_from_disk_in_sae_lens_layout(tmp_path: Path) -> None:
    run = _store(tmp_path)
    out = hookscope.export(run.path, tmp_path / "hf", format="datasets", select="mlp", shard_size=100)
    ds = datasets.load_from_disk(str(out))
    made_text = ds.info.description
    assert len(ds.cache_files) > 1  # written in several files, batch by batch
    assert ds.features["mlp"] == datasets.Array2D(shape=(5, 3), dtype="float32")
    ds.set_format("torch")
    batches, ds = token_batches(), ds[:]
    assert torch.equal(ds["mlp"], expected(TinyLM(), batches, "mlp", tokens=False))
    assert torch.equal(ds["token_ids"], torch.cat([b["input_ids"] for b in batches]).int())
    assert torch.equal(ds["attention_mask"], torch.cat([b["attention_mask"] for b in batches]).to(torch.int8))
    made = json.loads(made_text)
    assert made["provenance"]["weights_sha256"] == run.provenance["weights_sha256"]
    with pytest.raises(OutputExistsError, match=r"pass force=True to replace it \(the hookscope export there\)"):
        hookscope.export(run.path, out, format="datasets", select="mlp")
    assert hookscope.export(run.path, out, format="datasets", select="mlp", force=True) == out
    (out / "README.md").write_text("mine")  # force replaces the export, never a file the user added
    with pytest.raises(OutputExistsError, match=r"holds 1 file hookscope did not write \(README\.md\)"):
        hookscope.export(run.path, out, format="datasets", select="mlp", force=True)
    assert (out / "README.md").read_text() == "mine"


def test_sae_lens_reads_the_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    store = pytest.importorskip("sae_lens.training.activations_store")
    run = _store(tmp_path)
    out = hookscope.export(run, tmp_path / "hf", format="datasets", select="mlp")
    reader = store.ActivationsStore(
        model=None, dataset=None, streaming=False, hook_name="mlp", hook_head_index=None, context_size=5, d_in=3,
        n_batches_in_buffer=2, total_training_tokens=40, store_batch_size_prompts=2, train_batch_size_tokens=4,
        prepend_bos=False, normalize_activations="none", device=torch.device("cpu"), dtype="float32",
        cached_activations_path=str(out),
    )  # fmt: skip
    acts, ids = reader._load_raw_llm_batch_from_cached(raise_on_epoch_end=True)
    first = token_batches()[:1]
    assert torch.equal(acts, expected(TinyLM(), first, "mlp", tokens=False).reshape(-1, 3))
    assert torch.equal(ids.long(), first[0]["input_ids"].reshape(-1))


def test_a_token_major_store_is_refused(tmp_path: Path) -> None:
    run = _store(tmp_path, layout="tokens")
    with pytest.raises(OptionError, match="token-major"):
        hookscope.export(run, tmp_path / "hf", format="datasets")
