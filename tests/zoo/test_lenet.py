"""LeNet-5 on scikit-learn's digits: the shipped weights, the data, and the training that made them."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest
import torch

import hookscope
from hookscope.errors import OptionError
from hookscope.zoo import lenet

NAMES = ["conv1", "relu1", "pool1", "conv2", "relu2", "pool2", "fc1", "relu3", "fc2", "relu4", "fc3"]


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return lenet.lenet()


def accuracy(model: torch.nn.Module, split: str = "test") -> float:
    inputs, labels = lenet.digits(split)
    with torch.no_grad():
        return (model(inputs).argmax(1) == labels).float().mean().item()


def test_the_shipped_model_reads_the_held_out_digits(model) -> None:
    """The last 360 digits, written by other people than the first 1,437 it was trained on."""
    assert not model.training
    assert accuracy(model) >= 0.95


def test_the_modules_have_the_classic_names(model) -> None:
    assert [name for name, _ in model.named_children()] == NAMES
    assert sum(p.numel() for p in model.parameters()) == 61_706


def test_the_shipped_file_is_small_and_holds_exactly_the_model_weights() -> None:
    file = resources.files("hookscope").joinpath(lenet.WEIGHTS)
    with file.open("rb") as f:
        state = torch.load(f, map_location="cpu", weights_only=True)
    expected = lenet.LeNet().state_dict()
    assert {k: v.shape for k, v in state.items()} == {k: v.shape for k, v in expected.items()}
    assert all(v.dtype == torch.float32 for v in state.values())
    assert len(file.read_bytes()) < 300_000


def test_a_capture_sees_the_feature_maps_of_one_digit(model) -> None:
    x, _ = lenet.digits()
    with hookscope.capture(model, ["conv1", "conv2"]) as cap:
        model(x[:1])
    assert cap["conv1"].output.shape == (1, 6, 28, 28)
    assert cap["conv2"].output.shape == (1, 16, 10, 10)


def test_the_splits_are_the_first_80_and_the_last_20_percent_of_load_digits() -> None:
    from sklearn.datasets import load_digits

    train_x, train_y = lenet.digits("train")
    test_x, test_y = lenet.digits("test")
    all_x, all_y = lenet.digits("all")
    assert train_x.shape == (1437, 1, 32, 32) and test_x.shape == (360, 1, 32, 32)
    assert train_y.dtype == torch.int64
    torch.testing.assert_close(torch.cat([train_x, test_x]), all_x)
    assert torch.equal(all_y, torch.from_numpy(load_digits().target))
    assert torch.bincount(test_y).min() >= 33  # every digit is tested


def test_the_normalisation_constants_are_those_of_the_training_split() -> None:
    x, _ = lenet.digits("train")
    assert abs(x.mean().item()) < 0.01
    assert abs(x.std().item() - 1) < 0.01


def test_an_unknown_split_is_refused() -> None:
    with pytest.raises(OptionError, match=r"split must be one of \['all', 'test', 'train'\], got 'val'"):
        lenet.digits("val")


def test_digit_picture_is_the_input_upscaled_dark_on_white() -> None:
    """Every 8x8 block of the picture is one input pixel: ink 1 is black, ink 0 white."""
    x, _ = lenet.digits()
    picture = lenet.digit_picture(x[0])
    assert picture.mode == "L" and picture.size == (256, 256)
    pixels = torch.from_numpy(np.array(picture)).float()  # (256, 256)
    ink = (x[0, 0] * lenet.STD + lenet.MEAN).clamp(0, 1)
    torch.testing.assert_close(pixels[::8, ::8], ((1 - ink) * 255).round(), atol=0, rtol=0)
    assert torch.equal(pixels, pixels[::8, ::8].repeat_interleave(8, 0).repeat_interleave(8, 1))


def test_training_is_deterministic_beats_chance_and_restores_torch_settings() -> None:
    """One epoch (under a second); the shipped weights come from 60 (scripts/train_lenet.py)."""
    threads = torch.get_num_threads()
    rng = torch.get_rng_state()
    first, second = lenet.train(epochs=1), lenet.train(epochs=1)
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert accuracy(first) > 0.5  # chance is 0.1
    assert torch.get_num_threads() == threads
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.equal(torch.get_rng_state(), rng)
