"""Token activations to spatial maps: what a vision transformer's patches look like as images.

A ViT, DeiT or timm vision transformer turns an image into ``h * w`` patch tokens, laid out
row-major (token ``i`` is patch row ``i // w``, column ``i % w``), and puts ``prefix`` extra
tokens in front of them (a class token, register tokens, a distillation token). ``tokens_to_grid``
drops the prefix and puts each channel back on the patch grid::

    (B, N, C) or (N, C)  ->  (B, C, h, w)      with N = prefix + h * w

``spatial_maps`` is the one entry point for pictures and CAM code: conv maps pass through,
tokens go through ``tokens_to_grid``.
"""

from __future__ import annotations

import math

from torch import Tensor

from .errors import ShapeError

MAX_PREFIX = 8  # class + distillation + up to 4-6 register tokens fit; more is not a ViT we know


def tokens_to_grid(tokens: Tensor, *, prefix: int | None = None, grid: tuple[int, int] | None = None) -> Tensor:
    """``(B, N, C)`` or ``(N, C)`` token activations as ``(B, C, h, w)`` maps on the patch grid.

    ``prefix`` leading tokens (class, register, distillation) are dropped. With neither
    ``prefix`` nor ``grid``, ``prefix`` is the smallest ``p`` in ``0..8`` that leaves a square
    number of patches: 197 tokens are 1 + 14 x 14, 201 are 5 + 14 x 14. That guess is
    unambiguous for grids of 4 x 4 patches and more; pass ``prefix`` for smaller ones and
    ``grid=(h, w)`` for non-square ones (then ``prefix`` defaults to ``N - h * w``).
    """
    if not isinstance(tokens, Tensor) or tokens.dim() not in (2, 3):
        raise ShapeError(f"expected (batch, tokens, channels) or (tokens, channels), got {_describe(tokens)}")
    batched = tokens if tokens.dim() == 3 else tokens.unsqueeze(0)  # (B, N, C)
    batch, count, channels = batched.shape
    skip, (h, w) = _layout(count, prefix, grid)
    patches = batched[:, skip:]  # (B, h * w, C), row-major
    return patches.transpose(1, 2).reshape(batch, channels, h, w)


def spatial_maps(tensor: Tensor, *, tokens: bool = False) -> Tensor:
    """``(B, C, H, W)`` maps from conv maps ``(B, C, H, W)`` / ``(C, H, W)`` or ViT tokens ``(B, N, C)``.

    4-D maps pass through. A 3-D tensor is either one image's ``(C, H, W)`` maps or a batch of
    ``(B, N, C)`` tokens, and its shape alone cannot tell (a 150 x 226 conv map "fits" 6 + 12 x 12
    tokens), so hookscope does not guess: 3-D is ``(C, H, W)`` unless ``tokens=True``, which reads
    it (or an unbatched ``(N, C)``) as tokens through ``tokens_to_grid``. Captured activations
    always have a batch axis, so ``tokens=True`` is safe for them: conv maps pass through.
    """
    if not isinstance(tensor, Tensor):
        raise ShapeError(f"expected a torch.Tensor, got {_describe(tensor)}")
    if tensor.dim() == 4:
        return tensor
    if tokens and tensor.dim() in (2, 3):
        return tokens_to_grid(tensor)
    if tensor.dim() == 3:
        return tensor.unsqueeze(0)
    raise ShapeError(
        f"expected (B, C, H, W) or (C, H, W) maps or (B, N, C) tokens with tokens=True, got shape "
        f"{tuple(tensor.shape)}; a single (H, W) map is x[None, None]"
    )


def _layout(count: int, prefix: int | None, grid: tuple[int, int] | None) -> tuple[int, tuple[int, int]]:
    """``(prefix, (h, w))`` for ``count`` tokens; a one-line ``ShapeError`` when there is none."""
    if grid is not None:
        h, w = grid
        skip = count - h * w if prefix is None else prefix
        if h < 1 or w < 1 or skip < 0 or skip + h * w != count:
            given = "" if prefix is None else f" and prefix={prefix}"
            raise ShapeError(f"{count} tokens do not fit grid={grid}{given}: N must be prefix + h * w with prefix >= 0")
        return skip, (h, w)
    if prefix is not None:
        if not 0 <= prefix < count or not _is_square(count - prefix):
            raise ShapeError(
                f"{count} tokens minus prefix={prefix} leave no square patch grid; pass grid=(h, w) if it is not square"
            )
        side = math.isqrt(count - prefix)
        return prefix, (side, side)
    for skip in range(min(MAX_PREFIX, count - 1) + 1):
        if _is_square(count - skip):
            side = math.isqrt(count - skip)
            return skip, (side, side)
    raise ShapeError(
        f"{count} tokens are not a square patch grid after dropping 0..{MAX_PREFIX} leading tokens; "
        "pass grid=(h, w) and prefix= for this model"
    )


def _is_square(n: int) -> bool:
    return n > 0 and math.isqrt(n) ** 2 == n


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dim()}-D tensor of shape {tuple(value.shape)}"
    return type(value).__name__
