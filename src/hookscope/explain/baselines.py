"""Where integrated gradients starts and how it walks: baselines, the Gauss-Legendre rule, a blur.

Pure functions, shared by ``hookscope.explain.attribute`` (images) and
``hookscope.transformer.attribution`` (embeddings)::

    base = make_baseline(x, "blur")              # x's shape: a blurred copy of each image
    alphas, weights = gauss_legendre(50)         # (50,) nodes in (0, 1) and weights summing to 1
"""

from __future__ import annotations

import math
from typing import Literal, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import OptionError

Baseline = Union[Literal["zeros", "blur", "uniform"], Tensor, float, None]
BLUR_SIGMA = 0.05  # the "blur" baseline's Gaussian std, as a fraction of the image's larger side
UNIFORM_SEED = 0  # the "uniform" baseline is the same on every call


def gauss_legendre(n: int) -> tuple[Tensor, Tensor]:
    """Nodes in (0, 1), ascending, and weights summing to 1 of the n-point Gauss-Legendre rule.

    Golub-Welsch: the nodes are the eigenvalues of the Legendre Jacobi matrix, the weights the
    squared first components of its eigenvectors. Equals numpy's ``leggauss`` mapped to [0, 1].
    """
    k = torch.arange(1, n, dtype=torch.float64)
    off = k / torch.sqrt(4 * k**2 - 1)
    nodes, vectors = torch.linalg.eigh(torch.diag(off, 1) + torch.diag(off, -1))
    return (nodes + 1) / 2, vectors[0] ** 2


def make_baseline(x: Tensor, baseline: Baseline) -> Tensor:
    """The integrated-gradients starting point with x's shape (see ``attribute``)."""
    if isinstance(baseline, Tensor):
        try:
            return torch.broadcast_to(baseline.detach().to(x), x.shape)
        except RuntimeError as err:
            raise OptionError(
                f"baseline of shape {tuple(baseline.shape)} does not broadcast to x's shape {tuple(x.shape)}"
            ) from err
    if isinstance(baseline, (int, float)) and not isinstance(baseline, bool):
        return torch.full_like(x, baseline)
    if baseline is None or baseline == "zeros":
        return torch.zeros_like(x)
    if baseline == "blur":
        return gaussian_blur(x, BLUR_SIGMA * max(x.shape[-2:]))
    if baseline == "uniform":
        noise = torch.rand(x.shape, generator=torch.Generator().manual_seed(UNIFORM_SEED), dtype=x.dtype)
        low = x.flatten(1).amin(1).view(row_shape(x))
        return low + noise.to(x.device) * span(x)
    raise OptionError(
        f"baseline={baseline!r} is not a baseline; pass None or 'zeros', 'blur', 'uniform', a number, "
        "or a tensor broadcastable to x"
    )


def gaussian_blur(x: Tensor, sigma: float) -> Tensor:
    """``(B, C, H, W)`` blurred per channel by a Gaussian of std ``sigma`` pixels, reflect padding.

    The kernel reaches 3 sigma, at most the image's side - 1; torchvision's ``gaussian_blur``
    with the same kernel size gives the same result.
    """
    if x.dim() != 4:
        raise OptionError(f"baseline='blur' needs (batch, channels, height, width) input, got {tuple(x.shape)}")
    for dim in (2, 3):
        half = min(math.ceil(3 * sigma), x.shape[dim] - 1)
        t = torch.linspace(-half, half, 2 * half + 1, dtype=x.dtype, device=x.device)
        kernel = torch.exp(-0.5 * (t / sigma) ** 2)
        shape = (1, 1, -1, 1) if dim == 2 else (1, 1, 1, -1)
        pad = (0, 0, half, half) if dim == 2 else (half, half, 0, 0)
        weight = (kernel / kernel.sum()).view(shape).expand(x.shape[1], -1, -1, -1)  # one kernel per channel
        x = F.conv2d(F.pad(x, pad, mode="reflect"), weight, groups=x.shape[1])
    return x


def span(x: Tensor) -> Tensor:
    """Each image's max - min, shaped to broadcast against x: ``(B, 1, ...)``."""
    flat = x.flatten(1)
    return (flat.amax(1) - flat.amin(1)).view(row_shape(x))


def row_shape(x: Tensor) -> tuple[int, ...]:
    return (len(x), *[1] * (x.dim() - 1))
