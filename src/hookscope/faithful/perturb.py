"""Deletion and insertion: the maths, pure functions on tensors.

A map ranks the input's positions (pixels of an image, tokens of a sequence) from the most to the
least relevant: a stable descending sort, so tied values keep their index order. Deletion replaces
the top ``count`` positions with a baseline and insertion reveals them over the baseline, for
``counts(n, steps)`` = ``0, ceil(n / steps), 2 ceil(n / steps), ...`` and ``n`` (TorchCAM's grid). The
area under each score curve is taken with the trapezoid rule over the fractions ``count / n``.
A map's channels (an attribution's ``(B, C, H, W)``) are summed as absolute values; a map smaller
than the input is resized bilinearly (``align_corners=False``), as TorchCAM does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import ShapeError


def counts(positions: int, steps: int) -> list[int]:
    """How many positions are perturbed at each point of a curve: every ``ceil(positions / steps)``, then all."""
    size = -(-positions // steps)
    return [*range(0, positions, size), positions]


def per_position(heat: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A map as one value per position of an input of ``shape`` (B, C, H, W) or (B, T): (B, H, W) or (B, T).

    (B, C, H, W) maps become (B, H, W) as the sum of |value| over channels; (B, h, w) maps of another
    size are resized bilinearly (``align_corners=False``).
    """
    heat = heat.detach().float()
    if len(shape) == 2:  # tokens
        if heat.shape != shape:
            raise ShapeError(f"a token map must be (batch, tokens) = {shape}, got {tuple(heat.shape)}")
        return heat
    if heat.dim() == 4:
        heat = heat.abs().sum(dim=1)
    if heat.dim() != 3 or heat.shape[0] != shape[0]:
        raise ShapeError(
            f"a map of an image batch {shape} must be (B, H, W) or (B, C, H, W) with B={shape[0]}, "
            f"got {tuple(heat.shape)}"
        )
    if tuple(heat.shape[1:]) != tuple(shape[2:]):
        heat = F.interpolate(heat[:, None], size=tuple(shape[2:]), mode="bilinear", align_corners=False)[:, 0]
    return heat


def ranks(heat: Tensor) -> Tensor:
    """(B, N) rank of each position, 0 for the most relevant: a stable descending sort (ties by index)."""
    order = torch.argsort(heat.flatten(1), dim=1, descending=True, stable=True)
    return torch.argsort(order, dim=1)


def perturbed(x: Tensor, baseline: Tensor, rank: Tensor, count: int, *, insert: bool) -> Tensor:
    """One input (C, H, W) or (T,) with its ``count`` most relevant positions replaced by the baseline
    (deletion) or with only those revealed over it (insertion). ``rank``: (N,) from :func:`ranks`."""
    top = (rank < count).reshape(x.shape if x.dim() == 1 else x.shape[1:])  # (T,) or (H, W), over the channels
    keep = top if insert else ~top
    return torch.where(keep, x, baseline)


def auc(curve: Tensor, fractions: Tensor) -> Tensor:
    """(B,) areas under (B, P) curves over ``fractions`` (P,) in [0, 1], by the trapezoid rule."""
    return torch.trapezoid(curve, fractions, dim=-1)


def sobel(x: Tensor) -> Tensor:
    """(B, H, W) edge strength of an image batch (B, C, H, W): the Sobel gradient magnitude of its channel mean.

    An edge detector's map is the control a saliency map should beat: it knows nothing of the model.
    """
    grey = x.detach().float().mean(dim=1, keepdim=True)
    gx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]])
    kernels = torch.stack([gx, gx.t()])[:, None].to(grey)
    edges = F.conv2d(F.pad(grey, (1, 1, 1, 1), mode="replicate"), kernels)
    return edges.square().sum(dim=1).sqrt()
