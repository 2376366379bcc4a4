"""store: save/load round trips against the in-memory capture, bit for bit; lazy reads; the format."""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from torch import nn

import hookscope
from hookscope.errors import AmbiguousCallError, NotCapturedError, OutputExistsError, StoreError
from hookscope.report.html import write_page
from hookscope.store.format import FORMAT, VERSION
from hookscope.store.reader import load
from hookscope.store.save import save, weights_hash
from tests.models import LeNet, SharedCell

ALL_KINDS = ("input", "output", "grad_input", "grad_output", "param_grad")


def lenet_capture(dtype: torch.dtype | None = None) -> hookscope.Capture:
    torch.manual_seed(0)
    model = LeNet()
    with hookscope.capture(model, ["conv*", "fc*"], kinds=ALL_KINDS, dtype=dtype) as cap:
        model(torch.randn(2, 3, 32, 32, requires_grad=True)).logsumexp(1).sum().backward()
    return cap


def assert_same(run: hookscope.Capture | object, cap: hookscope.Capture) -> None:
    """Every site, call, kind, key and parameter gradient of ``cap`` is in ``run``, bit for bit."""
    assert list(run) == list(cap)  # type: ignore[call-overload]
    for name, record in cap.items():
        stored = run[name]  # type: ignore[index]
        assert (stored.type, stored.kinds, len(stored.calls)) == (record.type, record.kinds, len(record.calls))
        for call, back in zip(record.calls, stored.calls, strict=True):
            assert (back.index, back.order, back.missing) == (call.index, call.order, call.missing)
            assert back.error == call.error
            assert {k: list(v) for k, v in back.tensors.items()} == {k: list(v) for k, v in call.tensors.items()}
            for kind, held in call.tensors.items():
                assert back.keys(kind) == call.keys(kind)  # type: ignore[arg-type]
                for key, tensor in held.items():
                    assert_bits(back.tensors[kind][key], tensor)
        assert list(stored.param_grads) == list(record.param_grads)
        for pname, grads in record.param_grads.items():
            for a, b in zip(stored.param_grads[pname], grads, strict=True):
                assert_bits(a, b)


def assert_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    assert (a.shape, a.dtype) == (b.shape, b.dtype)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    assert torch.equal(a.contiguous().view(width), b.contiguous().view(width))


def test_save_and_load_round_trip_every_kind_bit_for_bit(tmp_path: Path) -> None:
    cap = lenet_capture()
    run = save(cap, tmp_path / "run.hookscope")
    assert_same(run, cap)
    assert_same(load(tmp_path / "run.hookscope"), cap)
    assert torch.equal(run["conv1"].output, cap["conv1"].output)  # the shortcuts work as on a capture
    assert run["fc3"].param_grad.keys() == {"weight", "bias"}
    assert [r.name for r in hookscope.gradient_flow(run)] == [r.name for r in hookscope.gradient_flow(cap)]
    assert run.complete and run.batches == [0] and run.rows is None
    assert "5 sites" in repr(run) and "complete" in repr(run)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_round_trips_exactly(tmp_path: Path, dtype: torch.dtype) -> None:
    cap = lenet_capture(dtype)
    assert cap["conv1"].output.dtype == dtype
    cap["conv1"].calls[0].tensors["output"]["out"][0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -0.0])
    assert_same(save(cap, tmp_path / "half"), cap)


def test_aliases_are_written_once_and_come_back_as_one_tensor(tmp_path: Path) -> None:
    net = nn.Sequential(nn.Linear(4, 64), nn.Identity(), nn.Dropout(0.5)).eval()
    with hookscope.capture(net, None, kinds=("input", "output")) as cap:
        net(torch.randn(8, 4))
    run = save(cap, tmp_path / "alias")
    assert run["1"].input is run["0"].output and run["2"].output is run["0"].output
    sizes = {row.key: row.nbytes for row in run.contents() if row.site == "0"}
    written = sum(row.nbytes for row in run.contents())
    assert written == sizes["args[0]"] + sizes["out"] == (8 * 4 + 8 * 64) * 4  # input + one (8, 64) output
    manifest = json.loads((tmp_path / "alias" / "manifest.json").read_text())
    where = [(row[manifest["tensor_columns"].index("shard")], row[manifest["tensor_columns"].index("name")])
             for row in manifest["tensors"]]  # fmt: skip
    assert len(set(where)) == 2 < len(where)


def test_a_module_called_several_times_keeps_every_call(tmp_path: Path) -> None:
    model = SharedCell(steps=3)
    with hookscope.capture(model, "cell", kinds=("output", "grad_output")) as cap:
        model(torch.randn(2, 4)).sum().backward()
    run = save(cap, tmp_path / "shared")
    assert_same(run, cap)
    with pytest.raises(AmbiguousCallError, match="called 3 times"):
        run["cell"].output
    assert torch.equal(run["cell"].stack(), cap["cell"].stack())


def test_missing_kinds_keep_their_reason(tmp_path: Path) -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    cap = hookscope.capture(net, "1", kinds=("output", "grad_output"))
    with pytest.warns(hookscope.CaptureWarning), cap, torch.no_grad():
        net(torch.randn(1, 2))
    run = save(cap, tmp_path / "missing")
    with pytest.raises(NotCapturedError, match=r"torch\.no_grad"):
        run["1"].grad_output


def test_shards_are_standard_safetensors_with_their_own_index(tmp_path: Path) -> None:
    cap = lenet_capture()
    save(cap, tmp_path / "small", shard_size=4096)
    manifest = json.loads((tmp_path / "small" / "manifest.json").read_text())
    assert (manifest["format"], manifest["version"], manifest["status"]) == (FORMAT, VERSION, "complete")
    assert len(manifest["shards"]) > 3
    for shard in manifest["shards"]:
        with safe_open(str(tmp_path / "small" / shard["file"]), "pt") as f:
            meta = json.loads(f.metadata()["hookscope"])
            for entry in meta["tensors"]:
                call = cap[entry["site"]].calls[entry["call"]] if entry["kind"] != "param_grad" else None
                held = (
                    call.tensors[entry["kind"]][entry["key"]]
                    if call is not None
                    else cap[entry["site"]].param_grads[entry["key"]][entry["call"]]
                )
                assert torch.equal(f.get_tensor(entry["name"]), held)
    assert_same(load(tmp_path / "small"), cap)


def test_provenance_names_versions_model_and_a_hash_of_its_weights(tmp_path: Path) -> None:
    cap = lenet_capture()
    run = save(cap, tmp_path / "p")
    prov = run.provenance
    assert prov["hookscope"] == hookscope.__version__ and prov["torch"] == torch.__version__
    assert prov["model"] == "LeNet" and prov["parameters"] == sum(p.numel() for p in cap.model.parameters())
    digest = hashlib.sha256()
    for name, t in cap.model.state_dict().items():
        digest.update(f"{name} {t.dtype} {tuple(t.shape)}\n".encode() + t.numpy().tobytes())
    assert prov["weights_sha256"] == digest.hexdigest() == weights_hash(cap.model)
    assert run.config["kinds"] == list(ALL_KINDS)
    with torch.no_grad():
        cap.model.fc3.bias[0] += 1
    assert weights_hash(cap.model) != prov["weights_sha256"]


def test_load_reads_the_manifest_only_and_tensors_when_used(tmp_path: Path) -> None:
    cap = lenet_capture()
    save(cap, tmp_path / "lazy")
    run = load(tmp_path / "lazy")
    shutil.move(tmp_path / "lazy" / "shards", tmp_path / "elsewhere")  # load opened no shard
    assert list(run) == list(cap) and run.batches == [0]
    with pytest.warns(hookscope.StoreWarning, match=r"shards/r0-000000.safetensors is damaged \(missing\)"):
        assert run["conv1"].calls == []  # the shard is left out of this Run, and it says so
    shutil.move(tmp_path / "elsewhere", tmp_path / "lazy" / "shards")
    assert torch.equal(load(tmp_path / "lazy")["conv1"].output, cap["conv1"].output)


def test_a_slice_reads_only_its_bytes(tmp_path: Path) -> None:
    big = torch.randn(64, 1024, 1024)  # 256 MiB in one tensor
    identity = nn.Identity()
    with hookscope.capture(identity, "", clone=False) as cap:
        identity(big)
    save(cap, tmp_path / "big")
    del big, cap
    stored = load(tmp_path / "big", verify=False)[""].output  # verify=True would read it all, once
    before = rss_kib()
    row = stored[17].clone()  # 4 MiB of the 256
    grew = rss_kib() - before
    assert row.shape == (1024, 1024) and grew < 32 * 1024, f"a 4 MiB slice grew RSS by {grew} KiB"
    total = float(stored.double().sum())
    assert total == total and rss_kib() - before > 128 * 1024  # reading it all did read it all


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_loading_runs_no_pickle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cap = lenet_capture()
    save(cap, tmp_path / "safe")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("unpickled something")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert_same(load(tmp_path / "safe"), cap)


def test_force_replaces_a_store_never_a_folder_of_the_user_s_data(tmp_path: Path) -> None:
    """hookscope.save(cap, "data", force=True) once deleted data/labels.csv; now it names it and touches nothing."""
    cap = lenet_capture()
    data = tmp_path / "data"
    data.mkdir()
    (data / "labels.csv").write_bytes(b"cat,0\n")
    refused = r"data already exists and holds 1 file hookscope did not write \(labels\.csv\); hookscope replaces"
    with pytest.raises(OutputExistsError, match=refused):
        save(cap, data, force=True)
    assert [p.name for p in data.iterdir()] == ["labels.csv"] and (data / "labels.csv").read_bytes() == b"cat,0\n"
    (tmp_path / "empty").mkdir()
    assert_same(save(cap, tmp_path / "empty"), cap)  # an empty folder needs no force, for every writer
    write_page(lambda: "<p>page</p>", tmp_path / "page")
    assert_same(save(cap, tmp_path / "page", force=True), cap)  # hookscope's own report: force replaces it


def test_errors_are_one_line_and_say_what_to_do(tmp_path: Path) -> None:
    cap = lenet_capture()
    save(cap, tmp_path / "s")
    with pytest.raises(OutputExistsError, match="already exists; pass force=True"):
        save(cap, tmp_path / "s")
    assert_same(save(cap, tmp_path / "s", force=True), cap)
    with pytest.raises(StoreError, match="does not exist"):
        load(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="is not a hookscope store"):
        load(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot write the store"):
        save(cap, tmp_path / "file" / "inside")
    with pytest.raises(NotCapturedError, match="closest: 'conv2', 'conv1'"):
        load(tmp_path / "s")["conv"]
    with pytest.raises(NotCapturedError, match="batch 3 is not in"):
        load(tmp_path / "s").batch(3)


def test_damaged_or_foreign_stores_are_refused(tmp_path: Path) -> None:
    cap = lenet_capture()
    save(cap, tmp_path / "s")
    manifest_path = tmp_path / "s" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "version": VERSION + 1}))
    with pytest.raises(StoreError, match="newer hookscope"):
        load(tmp_path / "s")
    manifest["shards"][0]["file"] = "../../etc/passwd"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match="outside the store"):
        load(tmp_path / "s")
    save(cap, tmp_path / "t")
    shard = next((tmp_path / "t" / "shards").iterdir())
    shard.write_bytes(shard.read_bytes()[:200])
    with pytest.warns(hookscope.StoreWarning, match="is damaged .200 bytes where the index says"):
        run = load(tmp_path / "t")
    with pytest.raises(hookscope.DamagedShardError, match="batch 0 was in it"):
        run.batch(0)
