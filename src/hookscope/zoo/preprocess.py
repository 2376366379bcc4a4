"""How a picture becomes a network's input, and back: ``Preprocess`` and the two presets the zoo uses.

``Preprocess.prepare`` turns a PIL image (or an (H, W, 3) uint8 array) into a ``(1, C, size, size)``
input: the largest centred square resized to ``size`` (``LITE``, EfficientNet-Lite's
``(rgb - 127) / 128``), or torchvision's ImageClassification preset, the shorter side resized to
``resize`` then a centred crop (``IMAGENET``); scaled to [0, 1] and normalised with ``mean``/``std``.
``Preprocess.show`` undoes it, for the pictures heatmaps are drawn over.

The networks of ``hookscope.zoo`` (``efficientnet_lite0``, ``mobilenet_v2``) take their inputs
this way; the CLI's input specs (``hookscope.cli.inputs``) and model specs
(``hookscope.cli.models``) pair each model with one of these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..base.optional import require
from ..errors import InputError


@dataclass(frozen=True)
class Preprocess:
    """How a picture becomes a model input; ``show`` undoes it for display."""

    size: int = 224  # the side of the square the model sees
    resize: int | None = None  # shorter side before the centred crop; None: crop the largest square first
    channels: int = 3  # 3 for RGB, 1 for grayscale
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)
    interpolation: str = "bilinear"  # how the picture is resized: "bilinear" or "bicubic" (timm's configs)

    def prepare(self, picture: Any) -> Tensor:
        """A PIL image (or an (H, W, 3) uint8 array) as a ``(1, channels, size, size)`` input."""
        pixels = _pixels(picture, self.channels)
        pixels = _crop(pixels, self.size, self.resize, self.interpolation)  # (1, C, size, size) in [0, 1]
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
        resize = (size * self.resize // self.size if self.resize else None) if size else self.resize  # keep the ratio
        changed = replace(self, size=size or self.size, resize=resize)
        return replace(changed, mean=tuple(mean or self.mean), std=tuple(std or self.std))


IMAGENET = Preprocess(size=224, resize=256)
LITE = Preprocess(size=224, mean=(127 / 255,) * 3, std=(128 / 255,) * 3)  # (rgb - 127) / 128


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


def _crop(pixels: Tensor, size: int, resize: int | None, mode: str = "bilinear") -> Tensor:
    """The centred ``size`` square in [0, 1], from 0..255 levels.

    With ``resize``: torchvision's ImageClassification preset (the shorter side resized to
    ``resize``, antialiased, rounded to whole levels, then a centred crop). Without: the largest
    centred square, resized to ``size``. ``mode`` is bilinear, or bicubic where timm's configs ask.
    """
    h, w = pixels.shape[2:]
    if resize is not None:
        shape = (resize, int(resize * w / h)) if h <= w else (int(resize * h / w), resize)  # torchvision's rounding
        resized = F.interpolate(pixels, size=shape, mode=mode, antialias=True, align_corners=False)
        top, left = round((shape[0] - size) / 2), round((shape[1] - size) / 2)
        return resized[:, :, top : top + size, left : left + size].round().clamp(0, 255) / 255
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    square = pixels[:, :, top : top + side, left : left + side]
    return F.interpolate(square, size=(size, size), mode=mode, antialias=True, align_corners=False).clamp(0, 255) / 255


def _column(values: tuple[float, ...]) -> Tensor:
    return torch.tensor(values, dtype=torch.float32)[None, :, None, None]
