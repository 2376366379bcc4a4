"""Model specs and weights: built-ins, torchvision, files and modules; safe loading with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from hookscope.cli.models import load_model, load_weights
from hookscope.errors import ModelError
from tests.models import LeNet


def test_builtin_efficientnet_is_pretrained_with_labels() -> None:
    loaded = load_model("efficientnet-lite0")
    assert not loaded.model.training
    assert loaded.labels is not None
    assert loaded.labels[967] == "espresso"
    assert loaded.notes == ()


def test_torchvision_models_are_random_init_with_a_note() -> None:
    loaded = load_model("torchvision:resnet18")
    assert type(loaded.model).__name__ == "ResNet"
    assert "random init" in loaded.notes[0]
    assert "--weights" in loaded.notes[0]


def test_a_function_in_a_file_and_in_a_module(tmp_path: Path) -> None:
    source = tmp_path / "my_model.py"
    source.write_text("import torch\n\ndef build():\n    return torch.nn.Linear(3, 2)\n")
    assert isinstance(load_model(f"{source}:build").model, nn.Linear)
    assert isinstance(load_model("tests.models:LeNet").model, LeNet)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("efficientnet-lite", r"unknown model 'efficientnet-lite' \(did you mean 'efficientnet-lite0'\?\)"),
        ("torchvision:resnet19", r"torchvision has no model 'resnet19'; closest: resnet18"),
        ("nowhere/model.py:build", r"model file 'nowhere/model.py' does not exist"),
        ("tests.models:LeNett", r"'tests.models' has no 'LeNett'; closest: LeNet"),
        ("tests.nothing:build", r"cannot import module 'tests.nothing'"),
        ("tests.models:Tensor", r"returned Tensor, not a torch.nn.Module|has no 'Tensor'"),
    ],
)
def test_bad_model_specs_are_one_line_errors(spec: str, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        load_model(spec)


def test_weights_round_trip_with_prefixes_and_wrappers(tmp_path: Path) -> None:
    """A state dict, a DataParallel-style 'module.' prefix, and a {'state_dict': ...} checkpoint."""
    torch.manual_seed(0)
    source = LeNet()
    torch.save(source.state_dict(), tmp_path / "plain.pt")
    torch.save({f"module.{k}": v for k, v in source.state_dict().items()}, tmp_path / "prefixed.pt")
    torch.save({"epoch": 3, "state_dict": source.state_dict()}, tmp_path / "checkpoint.pt")
    for name in ("plain.pt", "prefixed.pt", "checkpoint.pt"):
        target = LeNet()
        load_weights(target, str(tmp_path / name))
        for a, b in zip(target.parameters(), source.parameters(), strict=True):
            assert torch.equal(a, b)


def test_weights_that_do_not_match_name_the_keys(tmp_path: Path) -> None:
    state = LeNet().state_dict()
    state.pop("fc3.bias")
    state["extra.weight"] = torch.zeros(1)
    torch.save(state, tmp_path / "w.pt")
    with pytest.raises(ModelError, match=r"do not match LeNet: 1 missing \(fc3.bias\); 1 unexpected \(extra.weight\)"):
        load_weights(LeNet(), str(tmp_path / "w.pt"))
    state = LeNet().state_dict()
    state["fc3.bias"] = torch.zeros(11)
    torch.save(state, tmp_path / "shape.pt")
    with pytest.raises(ModelError, match=r"do not fit LeNet: size mismatch for fc3.bias"):
        load_weights(LeNet(), str(tmp_path / "shape.pt"))


def test_pickled_checkpoints_need_an_explicit_trust_flag(tmp_path: Path) -> None:
    """A whole pickled module is refused by default (it could run code) and accepted with trust."""
    torch.save(LeNet(), tmp_path / "whole.pt")
    with pytest.raises(ModelError, match=r"pickled objects; pass --trust-weights"):
        load_weights(LeNet(), str(tmp_path / "whole.pt"))
    load_weights(LeNet(), str(tmp_path / "whole.pt"), trust=True)
    loaded = load_model("tests.models:LeNet", weights=str(tmp_path / "whole.pt"), trust=True)
    assert not loaded.model.training


def test_missing_weights_file() -> None:
    with pytest.raises(ModelError, match=r"weights file 'nope.pt' does not exist"):
        load_model("tests.models:LeNet", weights="nope.pt")


def test_builtin_mobilenet_and_lenet() -> None:
    mobilenet = load_model("mobilenet-v2")
    assert type(mobilenet.model).__name__ == "MobileNetV2"
    assert mobilenet.preprocess.resize == 256
    lenet = load_model("lenet")
    assert lenet.preprocess.channels == 1
    assert lenet.preprocess.size == 32
    assert lenet.labels == [str(i) for i in range(10)]
