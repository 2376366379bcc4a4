"""Quantus 0.6's pixel flipping (Bach et al. 2015), for ``faithfulness(convention="quantus")``.

Quantus ranks *features*, not positions: the map is broadcast to the input's shape (B, C, H, W) and
every channel value is ranked on its own, most relevant first. Each step replaces the next
``ceil(features / steps)`` features with the baseline, cumulatively, and scores the class's
softmax probability; the curve has no point for the untouched input, and its area is the trapezoid
rule with unit spacing, so it grows with the number of steps (Quantus does not normalise it).
Quantus sorts with numpy's default (unstable) sort: where a map ties, the order is Quantus's own,
and only a map without ties gives Quantus's numbers exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ShapeError
from .perturb import resized


def features_of(heat: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A map as one value per feature of an input of ``shape`` (B, C, H, W): (B, C, H, W), (B, 1, H, W)
    or (B, H, W) maps broadcast over the channels, a smaller (B, h, w) one resized bilinearly first."""
    heat = heat.detach().float()
    if heat.dim() == 3:
        heat = resized(heat, tuple(shape[2:]))[:, None]
    try:
        return torch.broadcast_to(heat, shape)
    except RuntimeError as err:
        raise ShapeError(f"a map {tuple(heat.shape)} does not broadcast to the input {shape}") from err


def flipped(x: Tensor, fill: Tensor, features: Tensor, steps: int) -> tuple[list[Tensor], Tensor]:
    """The perturbed inputs of every image, step after step (image-major), and the fractions (P,) they hold."""
    b = len(x)
    total = features[0].numel()
    per_step = -(-total // steps)
    order = torch.argsort(features.reshape(b, -1), dim=1, descending=True, stable=True)
    copies = []
    for i in range(b):
        current = x[i].reshape(-1).clone()
        source = fill[i].reshape(-1)
        for start in range(0, total, per_step):
            chosen = order[i, start : start + per_step]
            current[chosen] = source[chosen]
            copies.append(current.reshape(x.shape[1:]).clone())
    done = torch.tensor([min(start + per_step, total) for start in range(0, total, per_step)], dtype=torch.float32)
    return copies, done / total
