"""Input specs: image files and folders, tensor files, ``random:1x3x224x224``, as a model's input.

=============================  ==========================================================
spec                           what it becomes
=============================  ==========================================================
``cat.jpg`` (several allowed)  each image prepared for the model, stacked into a batch
``photos/``                    every image in the folder, sorted by name
``batch.pt``                   a tensor saved with ``torch.save`` (read with weights_only)
``batch.npy``                  a numpy array (``allow_pickle=False``)
``batch.safetensors``          its tensor named ``input``, or its only tensor
``random:1x3x224x224``         ``torch.randn`` of that shape, seed 0
=============================  ==========================================================

An image is prepared by ``Preprocess``: the largest centred square resized to ``size`` (``LITE``),
or torchvision's ImageClassification preset, the shorter side resized to ``resize`` then a centred
crop (``IMAGENET``); scaled to [0, 1] and normalised with ``mean``/``std``. Pictures for heatmaps
are the same crops, before normalisation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import InputError
from ..optional import require

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
TENSOR_SUFFIXES = (".pt", ".pth", ".npy", ".safetensors")


@dataclass(frozen=True)
class Preprocess:
    """How a picture becomes a model input; ``show`` undoes it for display."""

    size: int = 224  # the side of the square the model sees
    resize: int | None = None  # shorter side before the centred crop; None: crop the largest square first
    channels: int = 3  # 3 for RGB, 1 for grayscale
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)

    def prepare(self, picture: Any) -> Tensor:
        """A PIL image (or an (H, W, 3) uint8 array) as a ``(1, channels, size, size)`` input."""
        pixels = _crop(_pixels(picture, self.channels), self.size, self.resize)  # (1, C, size, size) in [0, 1]
        return (pixels - _column(self.mean)) / _column(self.std)

    def show(self, x: Tensor) -> Any:
        """One prepared input ``(C, H, W)`` back to a PIL image."""
        image = require("PIL.Image")
        pixels = (x.detach().cpu().float() * _column(self.std)[0] + _column(self.mean)[0]).clamp(0, 1)
        array = (pixels * 255).round().byte().permute(1, 2, 0).numpy()
        return image.fromarray(array[:, :, 0] if array.shape[2] == 1 else array)

    def with_overrides(self, *, size: int | None = None, mean: Sequence[float] | None = None,
                       std: Sequence[float] | None = None) -> Preprocess:  # fmt: skip
        """This preprocessing with the CLI's ``--size``, ``--mean``, ``--std`` applied."""
        resize = (size * 8 // 7 if self.resize else None) if size else self.resize  # keep the crop ratio
        changed = replace(self, size=size or self.size, resize=resize)
        return replace(changed, mean=tuple(mean or self.mean), std=tuple(std or self.std))


IMAGENET = Preprocess(size=224, resize=256)
LITE = Preprocess(size=224, mean=(127 / 255,) * 3, std=(128 / 255,) * 3)  # (rgb - 127) / 128


@dataclass(frozen=True)
class LoadedInput:
    """A batch ready for the model, the pictures it came from (if any), and their names."""

    x: Tensor
    pictures: list[Any] | None
    names: list[str]


def load_input(specs: Sequence[str], preprocess: Preprocess = IMAGENET) -> LoadedInput:
    """The batch that ``specs`` name (see the module docstring); one-line ``InputError`` otherwise."""
    if not specs:
        raise InputError("no input given; pass an image, a folder, a tensor file or random:1x3x224x224")
    if len(specs) == 1 and specs[0].startswith("random:"):
        return LoadedInput(_random(specs[0]), None, [specs[0]])
    if len(specs) == 1 and specs[0].lower().endswith(TENSOR_SUFFIXES):
        return LoadedInput(_tensor_file(Path(specs[0])), None, [Path(specs[0]).name])
    paths = [p for spec in specs for p in _image_paths(Path(spec))]
    pictures = [_open_image(p) for p in paths]
    x = torch.cat([preprocess.prepare(p) for p in pictures])
    return LoadedInput(x, [preprocess.show(row) for row in x], [p.name for p in paths])


def _random(spec: str) -> Tensor:
    match = re.fullmatch(r"random:(\d+(?:x\d+)*)", spec)
    if not match:
        raise InputError(f"{spec!r} is not a random input; write it as random:1x3x224x224")
    shape = [int(n) for n in match.group(1).split("x")]
    if min(shape) < 1 or torch.Size(shape).numel() > 2**31:
        raise InputError(f"{spec!r} has an empty or huge shape; every size must be between 1 and 2**31 elements")
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


def _tensor_file(path: Path) -> Tensor:
    if not path.is_file():
        raise InputError(f"tensor file {str(path)!r} does not exist")
    try:
        if path.suffix == ".npy":
            return torch.from_numpy(require("numpy").load(path, allow_pickle=False))
        if path.suffix == ".safetensors":
            tensors = require("safetensors.torch").load_file(str(path))
            return _one_tensor(tensors, path)
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except InputError:
        raise
    except Exception as err:
        raise InputError(f"cannot read tensor file {str(path)!r}: {type(err).__name__}: {err}") from err
    return loaded if isinstance(loaded, Tensor) else _one_tensor(loaded, path)


def _one_tensor(loaded: object, path: Path) -> Tensor:
    if isinstance(loaded, dict):
        named = loaded.get("input")
        if isinstance(named, Tensor):
            return named
        tensors = [v for v in loaded.values() if isinstance(v, Tensor)]
        if len(tensors) == 1:
            return tensors[0]
    raise InputError(
        f"{str(path)!r} holds {type(loaded).__name__}, not one tensor; save the tensor itself or name it 'input'"
    )


def _image_paths(path: Path) -> list[Path]:
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not found:
            raise InputError(f"folder {str(path)!r} holds no image ({', '.join(IMAGE_SUFFIXES)})")
        return found
    if not path.exists():
        raise InputError(f"input {str(path)!r} does not exist")
    return [path]


def _open_image(path: Path) -> Any:
    image = require("PIL.Image")
    try:
        with image.open(path) as opened:
            opened.load()
            return opened.convert("RGB")
    except (OSError, ValueError, SyntaxError) as err:  # Pillow's UnidentifiedImageError is an OSError
        raise InputError(f"cannot read image {str(path)!r}: {err}") from err


def _pixels(picture: Any, channels: int) -> Tensor:
    """A PIL image or an (H, W, 3) uint8 array as a (1, channels, H, W) float tensor of 0..255 levels."""
    np = require("numpy")
    if hasattr(picture, "convert"):
        picture = picture.convert("L" if channels == 1 else "RGB")
    array = np.array(picture)
    if array.dtype != np.uint8 or not (
        (array.ndim == 3 and array.shape[2] == 3) or (array.ndim == 2 and channels == 1)
    ):
        raise InputError(f"expected an (H, W, 3) uint8 RGB image, got {array.shape} {array.dtype}")
    pixels = torch.from_numpy(array).float()
    if pixels.dim() == 3 and channels == 1:
        pixels = pixels @ torch.tensor([0.299, 0.587, 0.114])  # ITU-R 601-2 luma, as Pillow's "L"
    return (pixels[None] if pixels.dim() == 2 else pixels.permute(2, 0, 1))[None]


def _crop(pixels: Tensor, size: int, resize: int | None) -> Tensor:
    """The centred ``size`` square in [0, 1], from 0..255 levels.

    With ``resize``: torchvision's ImageClassification preset (the shorter side resized to
    ``resize``, bilinear and antialiased, rounded to whole levels, then a centred crop). Without:
    the largest centred square, resized to ``size``.
    """
    h, w = pixels.shape[2:]
    if resize is not None:
        shape = (resize, int(resize * w / h)) if h <= w else (int(resize * h / w), resize)  # torchvision's rounding
        resized = F.interpolate(pixels, size=shape, mode="bilinear", antialias=True, align_corners=False)
        top, left = round((shape[0] - size) / 2), round((shape[1] - size) / 2)
        return resized[:, :, top : top + size, left : left + size].round().clamp(0, 255) / 255
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    square = pixels[:, :, top : top + side, left : left + side]
    return (
        F.interpolate(square, size=(size, size), mode="bilinear", antialias=True, align_corners=False).clamp(0, 255)
        / 255
    )


def _column(values: tuple[float, ...]) -> Tensor:
    return torch.tensor(values, dtype=torch.float32)[None, :, None, None]
