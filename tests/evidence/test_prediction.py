"""explain_prediction: the bundle of a misclassified LeNet digit, checked against the schema and by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import hookscope
from hookscope.evidence import bundle, prediction
from hookscope.zoo import lenet

WRONG = 145  # the first misclassified digit of the test split: a 9 read as a 5


@pytest.fixture(scope="module")
def digit() -> tuple[nn.Module, Tensor, int, int]:
    model = lenet.lenet()
    x, y = lenet.digits("test")
    with torch.no_grad():
        predicted = int(model(x[WRONG : WRONG + 1]).argmax())
    assert predicted != int(y[WRONG])
    return model, x[WRONG : WRONG + 1], predicted, int(y[WRONG])


@pytest.fixture(scope="module")
def written(digit: Any, tmp_path_factory: pytest.TempPathFactory) -> hookscope.Evidence:
    model, x, _, expected = digit
    return hookscope.explain_prediction(model, x, tmp_path_factory.mktemp("ev") / "b", expected=expected, seed=3)


def _by_hand(model: nn.Module, x: Tensor, keep: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """LeNet's forward written out: (logits, pool2's output), pool2's output multiplied by ``keep``."""
    a = model.pool1(model.relu1(model.conv1(x)))
    pool2 = model.pool2(model.relu2(model.conv2(a)))
    h = pool2 if keep is None else pool2 * keep
    return model.fc3(model.relu4(model.fc2(model.relu3(model.fc1(h.flatten(1)))))), pool2


def test_the_bundle_validates_against_the_shipped_schema(written: hookscope.Evidence, digit: Any) -> None:
    manifest = json.loads((written.path / "manifest.json").read_text())
    jsonschema.validate(manifest, json.loads((Path(bundle.__file__).parent / "schemas/prediction.v1.json").read_text()))
    assert bundle.validate_bundle(written.path) == []
    _, _, predicted, expected = digit
    p = manifest["prediction"]
    assert (p["predicted"], p["expected"], p["correct"]) == (predicted, expected, False)
    assert [m["name"] for m in manifest["maps"]] == ["predicted@pool2", "expected@pool2", "contrastive@pool2"]
    assert manifest["layers"]["picked"] == "pool2" and manifest["layers"]["block"] is None
    assert manifest["provenance"]["seed"] == 3 and manifest["honesty"]["never_ran"] == []
    assert manifest["provenance"]["selectors"][0]["how"].startswith("picked: `pool2`")


def test_every_array_loads_without_pickle_and_the_store_opens(written: hookscope.Evidence, digit: Any) -> None:
    _, x, _, _ = digit
    arrays = sorted(str(p.relative_to(written.path)) for p in written.path.rglob("*.npy") if "store" not in p.parts)
    assert arrays == [m for m in written.manifest["files"] if m.endswith(".npy")]
    for name in arrays:
        np.load(written.path / name, allow_pickle=False)
    assert np.array_equal(written.array("input.npy"), x.numpy())
    store = hookscope.load(written.path / "store")
    assert list(store) == ["pool2"]
    assert tuple(store["pool2"].output.shape) == tuple(store["pool2"].grad_output.shape) == (1, 16, 5, 5)


def test_the_numbers_of_the_prediction_are_the_models(written: hookscope.Evidence, digit: Any) -> None:
    model, x, predicted, _ = digit
    with torch.no_grad():
        logits = model(x)[0]
    assert np.allclose(written.array("logits.npy"), logits.numpy())
    assert np.allclose(written.array("probabilities.npy"), logits.softmax(0).numpy())
    top = written.manifest["prediction"]["top_k"]
    assert [row["class"] for row in top] == logits.argsort(descending=True)[:5].tolist()
    assert top[0]["probability"] == pytest.approx(float(logits.softmax(0)[predicted]))


def test_the_contrastive_map_is_the_map_of_the_score_difference(written: hookscope.Evidence, digit: Any) -> None:
    """Grad-CAM of logit[5] - logit[9] at pool2, by hand (torch.autograd.grad), and by cam with a callable target."""
    model, x, predicted, expected = digit
    logits, pool2 = _by_hand(model, x)
    (grad,) = torch.autograd.grad(logits[0, predicted] - logits[0, expected], pool2)
    raw = (grad.mean(dim=(2, 3), keepdim=True) * pool2).sum(1).relu().detach()  # (1, 5, 5)

    def scaled(m: Tensor) -> Tensor:
        return (m - m.amin()) / (m.amax() - m.amin())

    heat = scaled(F.interpolate(scaled(raw)[:, None], size=(32, 32), mode="bilinear", align_corners=False)[0, 0])
    found = torch.from_numpy(written.array("maps/contrastive@pool2.npy"))
    assert torch.allclose(found, heat, atol=1e-5)
    difference = hookscope.cam(model, x, "gradcam", lambda out: out[:, predicted] - out[:, expected], select="pool2")
    assert torch.allclose(found, difference[0], atol=1e-6)
    assert not torch.allclose(found, torch.from_numpy(written.array("maps/predicted@pool2.npy")), atol=1e-2)


def test_the_ablation_is_verified_by_hand(written: hookscope.Evidence, digit: Any) -> None:
    model, x, predicted, expected = digit
    ablation = written.manifest["ablation"]
    keep = torch.from_numpy(written.array("ablation/keep.npy"))
    assert ablation["status"] == "verified" and ablation["positions"] == math.ceil(0.1 * 25) == int((keep == 0).sum())
    heat = torch.from_numpy(written.array("maps/contrastive@pool2.npy"))
    small = F.adaptive_avg_pool2d(heat[None, None], (5, 5)).flatten()
    assert set((keep.flatten() == 0).nonzero().flatten().tolist()) == set(small.topk(3).indices.tolist())
    with torch.no_grad():
        before, pool2 = _by_hand(model, x)
        after, _ = _by_hand(model, x, keep)
    assert ablation["before"] == pytest.approx(float(before[0, predicted] - before[0, expected]), rel=1e-5)
    assert ablation["after"] == pytest.approx(float(after[0, predicted] - after[0, expected]), rel=1e-5)
    assert ablation["confirms"] == (ablation["after"] < ablation["before"])
    changed = int(((pool2 * keep) != pool2).sum())
    assert ablation["tally"] == {"calls": 1, "changed": changed, "numel": pool2.numel()}


def test_the_layers_are_ranked_by_the_contrastive_gradient(written: hookscope.Evidence, digit: Any) -> None:
    model, x, predicted, expected = digit
    outputs: dict[str, Tensor] = {}
    handles = [m.register_forward_hook(lambda m, i, o, n=n: outputs.setdefault(n, o))
               for n, m in model.named_modules() if n]  # fmt: skip
    try:
        logits = model(x)
    finally:
        for h in handles:
            h.remove()
    grads = torch.autograd.grad(logits[0, predicted] - logits[0, expected], list(outputs.values()))
    norms = {n: float(g.norm()) for n, g in zip(outputs, grads, strict=True)}
    ranked = written.manifest["layers"]["ranked"]
    assert sorted(r["layer"] for r in ranked) == sorted(norms)
    assert [r["grad_norm"] for r in ranked] == sorted((r["grad_norm"] for r in ranked), reverse=True)
    for row in ranked:
        assert row["grad_norm"] == pytest.approx(norms[row["layer"]], rel=1e-5)


def _contents(folder: Path) -> dict[str, Any]:
    """Every file's bytes, a JSON file's parsed with its ``created`` times dropped (and the store manifest's
    checksum, which is of the dated text)."""

    def undated(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: undated(v) for k, v in value.items() if k not in ("created", "manifest_crc32")}
        return [undated(v) for v in value] if isinstance(value, list) else value

    return {
        str(p.relative_to(folder)): undated(json.loads(p.read_text())) if p.suffix == ".json" else p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_rerun_with_the_same_seed_writes_the_same_bytes(
    written: hookscope.Evidence, digit: Any, tmp_path: Path
) -> None:
    model, x, _, expected = digit
    again = hookscope.explain_prediction(model, x, tmp_path / "again", expected=expected, seed=3)
    first, second = _contents(written.path), _contents(again.path)
    assert first.keys() == second.keys() and len(first) > 8
    assert [name for name in first if first[name] != second[name]] == []


def test_an_existing_folder_is_refused_and_force_replaces_it(digit: Any, tmp_path: Path) -> None:
    model, x, _, expected = digit
    hookscope.explain_prediction(model, x, tmp_path / "b", expected=expected)
    with pytest.raises(hookscope.OutputExistsError, match="pass force=True"):
        hookscope.explain_prediction(model, x, tmp_path / "b", expected=expected)
    hookscope.explain_prediction(model, x, tmp_path / "b", expected=1, force=True)
    assert hookscope.Evidence.read(tmp_path / "b").manifest["prediction"]["expected"] == 1


def test_a_writer_killed_midway_leaves_no_folder(digit: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, x, _, expected = digit

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(prediction, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        hookscope.explain_prediction(model, x, tmp_path / "b", expected=expected)
    assert list(tmp_path.iterdir()) == []


def test_bad_input_is_one_line_and_nothing_is_written(digit: Any, tmp_path: Path) -> None:
    model, x, _, _ = digit
    with pytest.raises(hookscope.TargetError, match=r"expected=10 is not a class of the model's 10 outputs"):
        hookscope.explain_prediction(model, x, tmp_path / "b", expected=10)
    with pytest.raises(hookscope.OptionError, match=r"explains one image \(1, C, H, W\), got shape \(2, 1, 32, 32\)"):
        hookscope.explain_prediction(model, x.repeat(2, 1, 1, 1), tmp_path / "b", expected=1)
    assert list(tmp_path.iterdir()) == []
    assert hookscope.find_hooks(model) == []


def test_the_report_page_and_the_text_show_the_bundle(written: hookscope.Evidence, digit: Any) -> None:
    model, x, _, _ = digit
    page = hookscope.render_html(hookscope.build_report(model, x, graph=False, sections=[written]))
    assert "Why this prediction" in page and "contrastive@pool2" in page
    text = written.table()
    assert "predicted 5, expected 9 (wrong)" in text and "ablation of the top 3 positions at `pool2`" in text


class _Unused(nn.Module):
    """A CNN with a layer its forward never calls."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.spare = nn.Linear(4, 4)  # never called
        self.head = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.relu(self.conv(x)).mean(dim=(2, 3)))


def test_a_right_prediction_says_what_cannot_be_said(tmp_path: Path) -> None:
    """Predicted == expected: the contrastive score is 0, its map blank, its ablation refused; the unused layer is
    named as never run. The bundle is still sound."""
    torch.manual_seed(0)
    model, x = _Unused().eval(), torch.randn(1, 1, 8, 8)
    with torch.no_grad():
        right = int(model(x).argmax())
    found = hookscope.explain_prediction(model, x, tmp_path / "b", expected=right)
    honesty = found.manifest["honesty"]
    assert honesty["blank_maps"] == ["contrastive@relu"] and honesty["never_ran"] == ["spare"]
    assert found.manifest["ablation"] == {"status": "refused", "why": "the contrastive map at `relu` is blank: it "
                                          "points at no region"}  # fmt: skip
    assert any("ablation at `relu`" in r for r in honesty["refused"])
    [contrastive] = [m for m in found.manifest["maps"] if m["target"] == "contrastive"]
    assert contrastive["blank"] and contrastive["faithfulness"] == {"status": "not computed", "why": "the map is blank"}
    assert bundle.validate_bundle(found.path) == []


def test_maps_at_the_layer_and_at_its_block(tmp_path: Path) -> None:
    """A layer inside a block: each target's map at both; select= is said as asked and as resolved."""
    torch.manual_seed(1)
    block = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1))
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), block, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    model.eval()
    x = torch.randn(1, 1, 8, 8)
    found = hookscope.explain_prediction(model, x, tmp_path / "b", expected=0, select="1.2", top_k=2)
    names = [m["name"] for m in found.manifest["maps"]]
    assert names == [f"{t}@{site}" for t in ("predicted", "expected", "contrastive") for site in ("1.2", "1")]
    assert found.manifest["layers"]["block"] == "1"
    assert found.manifest["provenance"]["selectors"] == [{"asked": "'1.2'", "resolved": ["1.2"],
                                                          "how": "select='1.2' matched `1.2`"}]  # fmt: skip
    for target in ("predicted", "expected", "contrastive"):  # the block returns its last layer's output
        assert np.array_equal(found.array(f"maps/{target}@1.2.npy"), found.array(f"maps/{target}@1.npy"))
    assert len(found.manifest["prediction"]["top_k"]) == 2 and bundle.validate_bundle(found.path) == []
