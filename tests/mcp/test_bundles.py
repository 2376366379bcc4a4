"""The ``bundle`` tool on real evidence bundles: what it says is the manifest's, its problems are kept facts.

The oracle is the bundle itself: ``manifest.json`` as ``explain_prediction`` and ``nan_guard(evidence=)``
wrote it, and ``validate_bundle``'s problems once a listed file is removed by hand.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.mcp.catalog import answer
from hookscope.zoo import lenet


class Standardize(nn.Module):
    """Zero spread over a batch of equal rows: 0 / 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(0)) / x.std(0)


@pytest.fixture(scope="module")
def prediction(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = lenet.lenet()
    x, y = lenet.digits("test")
    out = tmp_path_factory.mktemp("bundles") / "why"
    hookscope.explain_prediction(model, x[145:146], out, expected=int(y[145]))
    return out


@pytest.fixture(scope="module")
def alert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), Standardize(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tmp_path_factory.mktemp("bundles") / "nan"

    def train() -> None:
        with hookscope.nan_guard(model, opt, evidence=out):
            for x in [torch.randn(16, 4) for _ in range(2)] + [torch.ones(16, 4)]:
                loss = model(x).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()

    with pytest.raises(hookscope.NonFiniteError):
        train()
    return out


def manifest(path: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((path / "manifest.json").read_text())
    return found


def test_a_wrong_prediction_is_read_as_its_manifest_says(prediction: Path) -> None:
    m = manifest(prediction)
    found = answer("bundle", {"path": str(prediction), "max_tokens": 10_000})
    data = found.data()["sections"]
    assert data["Status"]["problems"] == [] and data["Prediction"] == m["prediction"]
    text = found.text()
    assert f"predicted {m['prediction']['predicted']}, expected {m['prediction']['expected']} (wrong)" in text
    maps = data["Maps and their faithfulness"]
    assert [row["map"] for row in maps] == [s["name"] for s in m["maps"]]
    for row, s in zip(maps, m["maps"], strict=True):
        f = s["faithfulness"]
        assert row["deletion AUC (random)"] == f"{f['deletion_auc']:.3f} ({f['random_deletion_auc']:.3f})"
    verdict = "confirms the map" if m["ablation"]["confirms"] else "does NOT confirm the map"
    assert verdict in text and data["Ablation"] == m["ablation"]
    ranked = [r["layer"] for s in found.sections if s.title.startswith("Layers by") for r in s.data]
    assert ranked == [r["layer"] for r in m["layers"]["ranked"]]
    assert answer("info", {"path": str(prediction), "max_tokens": 10_000}).data() | {"tool": "bundle"} == found.data()


def test_an_alert_bundle_gives_its_finding_first_and_never_unpickles(alert: Path, monkeypatch: pytest.MonkeyPatch
                                                                      ) -> None:  # fmt: skip
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the tool unpickled a file of the bundle")

    for target, name in [(pickle, "load"), (pickle, "loads"), (torch, "load")]:
        monkeypatch.setattr(target, name, refuse)
    m = manifest(alert)
    found = answer("bundle", {"path": str(alert), "max_tokens": 60})
    assert [s.title for s in found.sections][:2] == ["Status", "Finding"]  # both kept under any budget
    assert found.sections[1].data == m["finding"]
    assert f"output at '{m['finding']['module']}', step {m['finding']['step']}, forward" in found.text()


def test_a_damaged_bundle_is_reported_and_nothing_else_is_claimed(prediction: Path, tmp_path: Path) -> None:
    copy = tmp_path / "damaged"
    shutil.copytree(prediction, copy)
    (copy / "logits.npy").unlink()
    found = answer("bundle", {"path": str(copy)})
    assert [s.title for s in found.sections] == ["Status"]
    assert found.data()["sections"]["Status"]["problems"] == ["logits.npy is listed in manifest.json but missing"]
    assert "NOT sound" in found.text()
    with pytest.raises(hookscope.InputError, match="is not a folder"):
        answer("bundle", {"path": str(tmp_path / "nothing")})
