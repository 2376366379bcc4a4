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

from typing import Union

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import OptionError, ShapeError

BASELINES = ("zeros", "mean", "blur")
Baseline = Union[str, int, float, Tensor]


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
    return resized(heat, tuple(shape[2:]))


def resized(heat: Tensor, size: tuple[int, ...]) -> Tensor:
    """(B, h, w) maps at ``size`` (bilinear, ``align_corners=False``, as TorchCAM resizes), unchanged when they fit."""
    if tuple(heat.shape[1:]) == tuple(size):
        return heat
    return F.interpolate(heat[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]


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


def baseline_of(x: Tensor, baseline: Baseline) -> Tensor:
    """What replaces a deleted position, shaped as ``x``."""
    if x.dim() == 2:
        if isinstance(baseline, bool) or not isinstance(baseline, int):
            raise OptionError(f"a token baseline is the id of a mask or pad token (an int), got {baseline!r}")
        return torch.full_like(x, baseline)
    if isinstance(baseline, Tensor):
        try:
            return torch.broadcast_to(baseline.to(x), x.shape)
        except RuntimeError as err:
            raise ShapeError(f"baseline {tuple(baseline.shape)} does not broadcast to x {tuple(x.shape)}") from err
    if baseline == "zeros":
        return torch.zeros_like(x)
    if baseline == "mean":
        return x.mean(dim=(2, 3), keepdim=True).expand_as(x).clone()
    if baseline == "blur":
        return blur(x)
    raise OptionError(f"unknown baseline {baseline!r}; pass {', '.join(BASELINES)} or a tensor")


def blur(x: Tensor, sigma_fraction: float = 1 / 16) -> Tensor:
    """A Gaussian blur of each channel, sigma a sixteenth of the image's shorter side (reflected edges)."""
    sigma = max(1.0, min(x.shape[2:]) * sigma_fraction)
    radius = int(3 * sigma)
    taps = torch.arange(-radius, radius + 1, dtype=torch.float32)
    kernel = torch.exp(-(taps**2) / (2 * sigma**2))
    kernel = (kernel / kernel.sum()).to(x)
    c = x.shape[1]
    out = F.pad(x, (radius, radius, radius, radius), mode="reflect")
    out = F.conv2d(out, kernel.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    return F.conv2d(out, kernel.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)
