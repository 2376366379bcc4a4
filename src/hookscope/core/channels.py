"""Token activations to spatial maps: what a vision transformer's patches look like as images.

A ViT, DeiT or timm vision transformer turns an image into ``h * w`` patch tokens, laid out
row-major (token ``i`` is patch row ``i // w``, column ``i % w``), and puts ``prefix`` extra
tokens in front of them (a class token, register tokens, a distillation token). ``tokens_to_grid``
drops the prefix and puts each channel back on the patch grid::

    (B, N, C) or (N, C)  ->  (B, C, h, w)      with N = prefix + h * w

``spatial_maps`` is the one entry point for pictures and CAM code: conv maps pass through,
tokens go through ``tokens_to_grid``, and channels-last maps ``(B, H, W, C)`` (Swin, ConvNeXt's
norms, MambaOut) are put channels-first when asked (``channels_last=True``).

A 4-D shape alone does not say where its channels are: ``(2, 7, 7, 768)`` is 2 maps of 7x768 or
768 maps of 7x7. ``channel_count(module)`` reads it from the module's weight (a convolution's
``out_channels``, a norm's features), or, for a module with children, from the last of them that
has one; ``is_channels_last(shape, channels)`` then tells the two apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import Tensor, nn

from ..errors import ShapeError

MAX_PREFIX = 8  # class + distillation + up to 4-6 register tokens fit; more is not a ViT we know


def tokens_to_grid(tokens: Tensor, *, prefix: int | None = None, grid: tuple[int, int] | None = None) -> Tensor:
    """``(B, N, C)`` or ``(N, C)`` token activations as ``(B, C, h, w)`` maps on the patch grid.

    ``prefix`` leading tokens (class, register, distillation) are dropped. With neither
    ``prefix`` nor ``grid``, ``prefix`` is the smallest ``p`` in ``0..8`` that leaves a square
    number of patches: 197 tokens are 1 + 14 x 14, 201 are 5 + 14 x 14. That guess is
    unambiguous for grids of 4 x 4 patches and more; pass ``prefix`` for smaller ones and
    ``grid=(h, w)`` for non-square ones (then ``prefix`` defaults to ``N - h * w``).

    Args:
        tokens: ``(B, N, C)`` or ``(N, C)`` token activations.
        prefix: how many leading tokens to drop; None guesses it (see above) or, with ``grid``, takes
            ``N - h * w``.
        grid: the patch grid ``(h, w)``; None reads a square one.

    Returns:
        ``(B, C, h, w)`` maps (``B = 1`` for unbatched tokens).

    Raises:
        ShapeError: ``tokens`` is not a 2-D or 3-D tensor, or no prefix/grid fits its token count.
    """
    if not isinstance(tokens, Tensor) or tokens.dim() not in (2, 3):
        raise ShapeError(f"expected (batch, tokens, channels) or (tokens, channels), got {_describe(tokens)}")
    batched = tokens if tokens.dim() == 3 else tokens.unsqueeze(0)  # (B, N, C)
    batch, count, channels = batched.shape
    skip, (h, w) = _layout(count, prefix, grid)
    patches = batched[:, skip:]  # (B, h * w, C), row-major
    return patches.transpose(1, 2).reshape(batch, channels, h, w)


def spatial_maps(tensor: Tensor, *, tokens: bool = False, channels_last: bool = False) -> Tensor:
    """``(B, C, H, W)`` maps from conv maps ``(B, C, H, W)`` / ``(C, H, W)`` or ViT tokens ``(B, N, C)``.

    4-D maps pass through. A 3-D tensor is either one image's ``(C, H, W)`` maps or a batch of
    ``(B, N, C)`` tokens, and its shape alone cannot tell (a 150 x 226 conv map "fits" 6 + 12 x 12
    tokens), so hookscope does not guess: 3-D is ``(C, H, W)`` unless ``tokens=True``, which reads
    it (or an unbatched ``(N, C)``) as tokens through ``tokens_to_grid``. Captured activations
    always have a batch axis, so ``tokens=True`` is safe for them: conv maps pass through.
    ``channels_last`` reads 4-D maps as ``(B, H, W, C)`` (see ``is_channels_last``).

    Args:
        tensor: ``(B, C, H, W)`` or ``(C, H, W)`` maps, or ``(B, N, C)`` / ``(N, C)`` tokens with ``tokens=True``.
        tokens: read a 3-D (or 2-D) tensor as ViT tokens on a patch grid; False reads 3-D as ``(C, H, W)``.
        channels_last: read 4-D maps as ``(B, H, W, C)``.

    Returns:
        ``(B, C, H, W)`` maps.

    Raises:
        ShapeError: ``tensor`` is not a tensor, or its shape is none of the above.
    """
    if not isinstance(tensor, Tensor):
        raise ShapeError(f"expected a torch.Tensor, got {_describe(tensor)}")
    if tensor.dim() == 4:
        return tensor.permute(0, 3, 1, 2) if channels_last else tensor
    if tokens and tensor.dim() in (2, 3):
        return tokens_to_grid(tensor)
    if tensor.dim() == 3:
        return tensor.unsqueeze(0)
    raise ShapeError(
        f"expected (B, C, H, W) or (C, H, W) maps or (B, N, C) tokens with tokens=True, got shape "
        f"{tuple(tensor.shape)}; a single (H, W) map is x[None, None]"
    )


def channel_count(module: nn.Module, *, inside: bool = True) -> int | None:
    """The channels of ``module``'s output as its own weight says (``out_channels``, ``out_features``,
    ``embedding_dim``, a norm's features). A module without one (``inside=False``: None) has the
    channels of the last projection inside it (a convolution, a linear map; else the last norm):
    Swin's ``PatchMerging`` normalises 4C channels, then projects them to the 2C it returns. None
    for a leaf without a weight (an activation, a dropout, a permutation)."""
    own = _own_count(module, _PROJECTIONS) or _own_count(module, _NORMS)
    if own is not None or not inside:
        return own
    inner = list(module.modules())[:0:-1]  # the modules inside, last first
    for attributes in (_PROJECTIONS, _NORMS):
        found = next((c for c in (_own_count(m, attributes) for m in inner) if c is not None), None)
        if found is not None:
            return found
    return None


def is_channels_last(shape: Sequence[int], channels: int | None) -> bool:
    """Whether a 4-D ``shape`` is ``(B, H, W, C)`` for a module whose output has ``channels`` channels:
    its last axis has that many entries and its second does not."""
    return len(shape) == 4 and channels is not None and shape[-1] == channels and shape[1] != channels


_PROJECTIONS = ("out_channels", "out_features", "embedding_dim")
_NORMS = ("num_features", "num_channels", "normalized_shape")


def _own_count(module: nn.Module, attributes: tuple[str, ...]) -> int | None:
    for attribute in attributes:
        value = getattr(module, attribute, None)
        if isinstance(value, tuple) and len(value) == 1:  # LayerNorm's normalized_shape over channels alone
            value = value[0]
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


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
