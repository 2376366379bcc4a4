"""Input specs: images, folders, tensor files and random inputs, with one-line errors for bad ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import skimage.data
import torch
from PIL import Image
from safetensors.torch import save_file

from hookscope.cli.inputs import load_input
from hookscope.errors import InputError
from hookscope.zoo.preprocess import IMAGENET, LITE, Preprocess


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    Image.fromarray(skimage.data.chelsea()).save(tmp_path / "b_cat.png")
    Image.fromarray(skimage.data.coffee()).save(tmp_path / "a_cup.jpg", quality=95)
    (tmp_path / "notes.txt").write_text("not an image")
    return tmp_path


def test_lite_preprocessing_is_the_largest_centred_square_as_rgb_minus_127_over_128(photos: Path) -> None:
    """A 300 x 451 photo: the centred 300 x 300 square, resized to 224, (v - 127) / 128 (v in 0..255)."""
    batch = load_input([str(photos / "b_cat.png")], LITE)
    pixels = torch.from_numpy(skimage.data.chelsea()).permute(2, 0, 1).float()[None]
    square = pixels[:, :, :, 75:375]
    expected = torch.nn.functional.interpolate(square, size=(224, 224), mode="bilinear", antialias=True)
    torch.testing.assert_close(batch.x, (expected.clamp(0, 255) - 127) / 128, atol=2e-5, rtol=0)
    assert batch.names == ["b_cat.png"]
    assert batch.pictures is not None
    assert batch.pictures[0].size == (224, 224)


def test_imagenet_preprocessing_is_torchvisions_preset(photos: Path) -> None:
    """IMAGENET equals torchvision's IMAGENET1K_V1 transforms (resize 256, crop 224, mean/std)."""
    from torchvision.models import MobileNet_V2_Weights

    x = load_input([str(photos / "b_cat.png")], IMAGENET).x
    theirs = MobileNet_V2_Weights.IMAGENET1K_V1.transforms()(torch.from_numpy(skimage.data.chelsea()).permute(2, 0, 1))
    torch.testing.assert_close(x[0], theirs, atol=1e-6, rtol=0)


@pytest.mark.parametrize("preprocess", [IMAGENET, LITE])
def test_show_undoes_the_normalisation(photos: Path, preprocess: Preprocess) -> None:
    """show(x) is the crop the model saw, to within a rounding step of 1/255."""
    x = load_input([str(photos / "a_cup.jpg")], preprocess).x[0]
    shown = torch.from_numpy(np.array(preprocess.show(x))).permute(2, 0, 1).float() / 255
    mean, std = torch.tensor(preprocess.mean)[:, None, None], torch.tensor(preprocess.std)[:, None, None]
    torch.testing.assert_close(shown, (x * std + mean).clamp(0, 1), atol=0.5 / 255 + 1e-6, rtol=0)


def test_a_folder_is_its_images_sorted_by_name(photos: Path) -> None:
    batch = load_input([str(photos)], LITE)
    assert batch.names == ["a_cup.jpg", "b_cat.png"]
    assert batch.x.shape == (2, 3, 224, 224)


def test_overrides_and_grayscale(photos: Path) -> None:
    gray = Preprocess(size=32, channels=1, mean=(0.5,), std=(0.5,))
    assert load_input([str(photos / "a_cup.jpg")], gray).x.shape == (1, 1, 32, 32)
    bigger = IMAGENET.with_overrides(size=160, mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
    assert bigger.size == 160
    assert bigger.resize == 182  # the 224 / 256 crop ratio is kept
    assert load_input([str(photos / "a_cup.jpg")], bigger).x.shape == (1, 3, 160, 160)


def test_tensor_files_and_random(tmp_path: Path) -> None:
    """.pt (weights_only), .npy (no pickle), .safetensors ('input' or the only tensor), random:."""
    t = torch.randn(2, 3, 8, 8)
    torch.save(t, tmp_path / "x.pt")
    np.save(tmp_path / "x.npy", t.numpy())
    save_file({"input": t, "other": torch.zeros(1)}, str(tmp_path / "x.safetensors"))
    for name in ("x.pt", "x.npy", "x.safetensors"):
        batch = load_input([str(tmp_path / name)])
        torch.testing.assert_close(batch.x, t)
        assert batch.pictures is None
    random = load_input(["random:1x3x16x16"]).x
    assert random.shape == (1, 3, 16, 16)
    assert torch.equal(random, load_input(["random:1x3x16x16"]).x)  # seeded


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.jpg", r"input '.*missing.jpg' does not exist"),
        (lambda d: _write(d / "broken.jpg", b"not a jpeg"), r"cannot read image '.*broken.jpg'"),
        (lambda d: _mkdir(d / "empty"), r"folder '.*empty' holds no image"),
        (lambda d: _save(d / "mixed.pt", {"a": torch.zeros(1), "n": 3}), r"holds dict of other things than tensors"),
        (lambda d: _save(d / "nested.pt", ((torch.zeros(1),),)), r"holds tuple of other things than tensors"),
        (lambda d: _save(d / "evil.pt", {"f": print}), r"cannot read tensor file '.*evil.pt'"),
        (lambda d: _write(d / "x.npy", b"garbage"), r"cannot read tensor file '.*x.npy'"),
        (lambda d: "random:1xAx3", r"'random:1xAx3' is not a random input; write it as random:1x3x224x224"),
        (lambda d: "random:0x3", r"empty or huge shape"),
    ],
)
def test_bad_inputs_are_one_line_errors(tmp_path: Path, make, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_input([str(make(tmp_path))])


def test_no_input_at_all() -> None:
    with pytest.raises(InputError, match=r"no input given"):
        load_input([])


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _save(path: Path, value: object) -> Path:
    torch.save(value, path)
    return path
