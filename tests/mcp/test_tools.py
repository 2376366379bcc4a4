"""The assistant's tools over real stores, against numbers computed by hand from the same model and inputs.

Stores are written by ``hookscope.extract`` and ``hookscope.watch`` on tiny models; the oracles are
the model's outputs recomputed with plain torch, ``Run.alerts`` as the watch wrote them, and the
store's bytes damaged by hand.
"""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope.errors import OptionError, StoreError
from hookscope.mcp.catalog import TOOLS, answer


def model(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def inputs() -> list[torch.Tensor]:
    torch.manual_seed(1)
    return [torch.randn(6, 4) for _ in range(3)]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tools") / "a.hookscope"
    hookscope.extract(model(), inputs(), out=out, progress=False)
    return out


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A watch run whose ReLU is dead (24 of 32 units can never fire) and whose loss is logged."""
    out = tmp_path_factory.mktemp("tools") / "w.hookscope"
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    with torch.no_grad():
        net[0].bias[:24] = -100.0
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with hookscope.watch(net, opt, every=1, out=out) as w:
        for _ in range(4):
            x, y = torch.randn(32, 16), torch.randn(32, 2)
            loss = F.mse_loss(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            w.log(loss=loss.item())
    return out, w


def test_statistics_equal_the_outputs_recomputed_by_hand(store: Path) -> None:
    net, xs = model(), inputs()
    with torch.no_grad():
        hidden = [net[0](x) for x in xs]
        relu = torch.cat([torch.relu(h) for h in hidden])
    data = answer("statistics", {"path": str(store)}).data()["sections"]["Statistics"]
    row = {r["site"]: r for r in data}["1"]
    assert int(row["values"]) == relu.numel()
    assert float(row["mean"]) == pytest.approx(relu.mean().item(), rel=1e-3)
    assert float(row["std"]) == pytest.approx(relu.std(correction=0).item(), rel=1e-3)  # the population std
    assert float(row["max"]) == pytest.approx(relu.max().item(), rel=1e-3)
    assert float(row["zeros"]) == pytest.approx((relu == 0).float().mean().item(), abs=1e-3)
    only = answer("statistics", {"path": str(store), "site": "2"}).data()["sections"]["Statistics"]
    assert [r["site"] for r in only] == ["2"]


def test_info_and_sites_say_what_the_store_holds(store: Path) -> None:
    found = answer("info", {"path": str(store)})
    status = found.data()["sections"]["Status"]
    assert status["kind"] == "tensor store" and status["complete"] and status["damaged"] == {}
    sites = found.data()["sections"]["Sites (3)"]
    assert [(s["site"], s["type"], s["shape"], s["tensors"]) for s in sites] == [
        ("0", "Linear", "[6, 8]", "3"), ("1", "ReLU", "[6, 8]", "3"), ("2", "Linear", "[6, 3]", "3")
    ]  # fmt: skip
    assert found.data()["sections"]["Provenance"] == hookscope.load(store).provenance
    assert [s["site"] for s in answer("sites", {"path": str(store), "select": "[02]"}).data()["sections"]["Sites (2)"]
            ] == ["0", "2"]  # fmt: skip


def test_explain_calls_out_the_relu_zeros_and_a_small_budget_keeps_the_status(store: Path) -> None:
    net, xs = model(), inputs()
    with torch.no_grad():
        share = torch.cat([torch.relu(net[0](x)) for x in xs]).eq(0).float().mean().item()
    full = answer("explain", {"path": str(store), "max_tokens": 5000})
    assert f"1 output out ({share:.0%})" in full.text() and full.dropped == ()
    small = answer("explain", {"path": str(store), "max_tokens": 60})
    assert [s.title for s in small.sections] == ["Status"]
    assert {t for t, _ in small.dropped} == {"What stands out", "What to ask next", "Statistics"}


def test_a_damaged_shard_is_a_fact_no_budget_drops(store: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "damaged.hookscope"
    shutil.copytree(store, copy)
    shard = next((copy / "shards").iterdir())
    raw = bytearray(shard.read_bytes())
    at = raw.index(b"call0/b1") + 6
    raw[at] ^= 0xFF  # one byte of a tensor's name in the shard's header
    shard.write_bytes(bytes(raw))
    found = answer("explain", {"path": str(copy), "max_tokens": 50})
    status = found.data()["sections"]["Status"]
    assert status["damaged"] and status["lost_batches"] and status["warnings"]
    assert "Damaged: shards/" in found.text() and found.sections[0].kept


def test_a_non_finite_site_is_kept_under_any_budget(tmp_path: Path) -> None:
    net = model()
    with torch.no_grad():
        net[2].weight[0, 0] = float("nan")
    hookscope.extract(net, inputs(), out=tmp_path / "nan.hookscope", progress=False)
    found = answer("explain", {"path": str(tmp_path / "nan.hookscope"), "max_tokens": 50})
    assert [s.title for s in found.sections] == ["Status", "Non-finite values"]
    assert found.sections[1].data == ["2 output out"]


def test_alerts_are_the_ones_the_watch_raised(watched: tuple[Path, Any]) -> None:
    path, w = watched
    rows = answer("alerts", {"path": str(path)}).data()["sections"][f"Alerts ({len(w.alerts)})"]
    assert [(int(r["step"]), r["module"], r["kind"]) for r in rows] == [(a.step, a.module, a.kind) for a in w.alerts]
    assert ("1", "dead") in {(r["module"], r["kind"]) for r in rows}
    reading = answer("explain", {"path": str(path)})
    assert "dead at 1 from step 2" in reading.text()
    losses = hookscope.load(path).scalars()["loss"]
    assert f"loss: {losses[0][1]:.4g} at step {losses[0][0]}" in reading.text()


def test_alerts_of_a_tensor_store_say_there_are_none(store: Path) -> None:
    assert "a tensor store keeps no alerts" in answer("alerts", {"path": str(store)}).text()


def test_compare_finds_the_changed_layer_and_what_only_one_holds(store: Path, tmp_path: Path) -> None:
    other = model()
    with torch.no_grad():
        other[2].weight.mul_(3.0)  # only the last layer's outputs change: scaled, so CKA stays 1
    hookscope.extract(other, inputs(), out=tmp_path / "b.hookscope", select=["1", "2"], progress=False)
    found = answer("compare", {"path_a": str(store), "path_b": str(tmp_path / "b.hookscope")}).data()["sections"]
    assert found["Not compared"] == {"only in A": ["0"], "only in B": []}
    moved = found["Statistics, most moved first"]
    assert [r["site"] for r in moved] == ["2", "1"] and float(moved[1]["|mean moved| / std A"]) == 0.0
    cka = {r["unit"]: float(r["cka"]) for r in found[next(t for t in found if t.startswith("CKA"))]}
    assert cka == pytest.approx({"1": 1.0, "2": 1.0}, abs=1e-6)
    hookscope.extract(model(), inputs(), out=tmp_path / "c.hookscope", select=["0"], progress=False)
    apart = answer("compare", {"path_a": str(tmp_path / "c.hookscope"), "path_b": str(tmp_path / "b.hookscope")})
    assert apart.data()["sections"]["Not compared"] == {"only in A": ["0"], "only in B": ["1", "2"]}
    assert [s.title for s in apart.sections][-1] == "Not compared"  # no empty table of statistics, no CKA
    with torch.no_grad():  # the oracle of "moved": |mean_B - mean_A| / std_A of site 2's outputs
        a = torch.cat([model()(x) for x in inputs()])
        b = torch.cat([other(x) for x in inputs()])
    oracle = abs(b.mean() - a.mean()).item() / a.std(correction=0).item()
    assert float(moved[0]["|mean moved| / std A"]) == pytest.approx(oracle, rel=1e-3)


def test_api_maps_every_public_name_and_shows_one_signature() -> None:
    found = answer("api", {"max_tokens": 100_000}).data()["sections"]
    names = {row["name"] for rows in found.values() for row in rows}
    assert names == {n for n in hookscope.__all__ if not n.startswith("_")}
    one = answer("api", {"name": "capture"}).data()["sections"]["capture"]
    assert one["signature"] == f"capture{inspect.signature(hookscope.capture)}"
    with pytest.raises(OptionError, match="not a public name of hookscope; closest: 'capture'"):
        answer("api", {"name": "captur"})


def test_arguments_are_checked_against_the_schema(store: Path) -> None:
    assert TOOLS["compare"].schema()["required"] == ["path_a", "path_b"]
    assert TOOLS["info"].schema()["properties"]["max_tokens"]["type"] == "integer"
    with pytest.raises(OptionError, match="info takes no argument 'pth'; closest: 'path'"):
        answer("info", {"pth": str(store)})
    with pytest.raises(OptionError, match="info needs 'path'"):
        answer("info", {})
    with pytest.raises(OptionError, match="max_tokens='9' is not a integer"):
        answer("info", {"path": str(store), "max_tokens": "9"})
    with pytest.raises(OptionError, match="no tool 'inf'; closest: 'info'"):
        answer("inf", {})
    with pytest.raises(StoreError, match="does not exist"):
        answer("info", {"path": str(store.parent / "nothing")})


def test_no_tool_unpickles_anything(store: Path, watched: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a tool unpickled something")

    for target, name in [(pickle, "load"), (pickle, "loads"), (torch, "load")]:
        monkeypatch.setattr(target, name, refuse)
    for tool in ("info", "sites", "statistics", "alerts", "explain"):
        for path in (store, watched[0]):
            answer(tool, {"path": str(path)})
    answer("compare", {"path_a": str(store), "path_b": str(store)})


def test_a_zero_initialised_head_is_undefined_in_the_histories_not_missing(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3, bias=False))
    with torch.no_grad():
        net[2].weight.zero_()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with hookscope.watch(net, opt, every=1, out=tmp_path / "zero.hookscope"):
        for _ in range(3):
            loss = F.cross_entropy(net(torch.randn(8, 8)), torch.randint(0, 3, (8,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    rows = answer("statistics", {"path": str(tmp_path / "zero.hookscope"), "max_tokens": 10_000}).data()["sections"]
    row = {(r["site"], r["column"]): r for r in rows["Histories"]}[("2", "update_ratio")]
    assert (row["first"], row["undefined steps"], row["steps not measured"]) == ("undefined", "1", "0")
    assert answer("alerts", {"path": str(tmp_path / "zero.hookscope")}).data()["sections"]["Alerts (0)"] == []
