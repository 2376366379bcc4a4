"""CAM maps scaled to [0, 1] at the input's size, and the rule that says a map has nothing to show.

::

    heat = normalize_maps(raw, size=(224, 224))   # (B, h, w) raw maps -> (B, 224, 224) in [0, 1]

The order is the peers': each map is min-maxed at the layer's size, resized (bilinear,
``align_corners=False``), and min-maxed again, as pytorch-grad-cam's ``scale_cam_image`` runs
before and after resizing (``base_cam.aggregate_multi_layers``) and TorchCAM's map is min-maxed at
the layer's size and again when resized for display. A bilinear upsample of a [0, 1] map does not
reach 0 and 1 exactly, so the second scaling changes every pixel by up to a few percent.

A flat map comes out exactly 0 (``flat_maps``): one whose max - min is at most ``FLAT`` times its
largest magnitude (rounding, not a signal), and one whose largest magnitude is at most ``TINY``
(the map of a layer that is ~0 everywhere, such as torchvision's randomly initialised
EfficientNets at ``features``: values ~1e-15, where pytorch-grad-cam's 1e-7 in the denominator
gives ~1e-8). ``flat_reason`` says in words why a map of ``cam()`` came out all zeros.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

FLAT = 1e-6  # a map whose max - min is at most this share of its largest magnitude is flat
TINY = 1e-10  # a map whose largest magnitude is at most this is flat: ~0 everywhere


def flat_maps(maps: Tensor) -> Tensor:
    """(B,) True where a (B, h, w) map has nothing to show: its max - min is at most ``FLAT`` times
    its largest magnitude, or that magnitude is at most ``TINY``."""
    magnitude = maps.abs().amax(dim=(1, 2))
    span = maps.amax(dim=(1, 2)) - maps.amin(dim=(1, 2))
    return (span <= FLAT * magnitude) | (magnitude <= TINY)


def scale_maps(maps: Tensor) -> Tensor:
    """(B, h, w) maps min-maxed per image to [0, 1]; a flat one (``flat_maps``) is all zeros."""
    flat = flat_maps(maps)[:, None, None]  # (B, 1, 1)
    low = maps.amin(dim=(1, 2), keepdim=True)
    span = maps.amax(dim=(1, 2), keepdim=True) - low
    span = torch.where(flat, torch.ones_like(span), span)  # no 0/0 where the map is flat
    return torch.where(flat, torch.zeros_like(maps), (maps - low) / span)


def normalize_maps(maps: Tensor, size: tuple[int, int] | None = None) -> Tensor:
    """(B, h, w) maps scaled per image to [0, 1], resized (bilinear) to ``size`` and scaled again.

    Scaling before resizing keeps a flat map at exactly 0 (a 1x1 layer's too); scaling after it
    makes every map span [0, 1] at the size shown, as pytorch-grad-cam's and TorchCAM's do.
    """
    maps = scale_maps(maps)
    if size is not None and tuple(maps.shape[-2:]) != tuple(size):
        maps = F.interpolate(maps[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]
        maps = scale_maps(maps)
    return maps


def flat_reason(raw: Tensor, gradients: Tensor | None, layer: str) -> str | None:
    """Why ``cam()``'s maps at ``layer`` are all zeros, in one line; None when every map shows
    something. ``raw`` (B, h, w) are the raw maps, ``gradients`` (B, C, h, w) the target's gradient
    at the layer (None for a method without one)."""
    flat = flat_maps(raw)
    if not bool(flat.any()):
        return None
    images = ", ".join(str(i) for i in flat.nonzero().flatten().tolist())
    if gradients is not None and bool((gradients[flat] == 0).all()):
        why = (
            "the target's gradient at that layer is zero (the score does not depend on it: a head that starts at"
            " zero, a class with zero weights, a vision transformer's last block, whose patch tokens nothing reads)"
        )
    elif raw.shape[-2:] == (1, 1):
        why = "the layer is 1x1 at this input size, so its map has a single value"
    elif bool((raw[flat] == 0).all()):
        why = "the raw map is 0 everywhere after its ReLU (no position holds evidence for the target)"
    else:
        magnitude = float(raw[flat].abs().max())
        why = f"the raw map is flat (its max - min is rounding, or its largest value {magnitude:.3g} is ~0)"
    return f"cam() maps of image(s) {images} at layer {layer!r} are all zeros: {why}; try another layer or target"
