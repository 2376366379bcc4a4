"""Tensors in, PIL images out: feature-map grids, heatmap overlays and side-by-side panels.

::

    feature_grid(cap["layer1.0.conv1"].output)          one tile per channel, viridis
    feature_grid(cap["layer1.0.conv1"].grad_output, diverging=True)   red +, blue -, zero pale
    overlay(image, cam[0]), panel(image, cam[0])        a [0, 1] heatmap over a picture

Pillow, matplotlib (its colormaps) and numpy are imported inside the functions that draw
(``pip install 'hookscope[viz]'``); ``import hookscope.viz.images`` needs torch alone.

Colours: a value ``v`` in [0, 1] is drawn as matplotlib's ``colormaps[cmap](v, bytes=True)``.
Non-finite values (NaN, +-Inf) are left out of every min / max and drawn in the ``background``
colour, like the padding between tiles.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from ..base.optional import require
from ..core.channels import spatial_maps
from ..errors import OptionError, ShapeError

if TYPE_CHECKING:
    from matplotlib.colors import Colormap
    from numpy.typing import NDArray
    from PIL import Image, ImageFont

Pick = Literal["first", "top_mean", "top_var"]
Normalize = Literal["tile", "shared"]
RGB = tuple[int, int, int]
Picture = Union["Image.Image", Tensor, "NDArray[Any]"]  # see to_pil for the layouts it takes
Heat = Union[Tensor, "NDArray[Any]"]  # one (h, w) map in [0, 1]

PICKS = ("first", "top_mean", "top_var")
NORMALIZE = ("tile", "shared")
DEFAULT_CMAP = "viridis"
DIVERGING_CMAP = "RdBu_r"
BLOCK_GAP = 4  # the images of a batch are drawn as blocks of rows, 4 paddings apart
PANEL_GAP = 8  # pixels between the three pictures of a panel
CAPTION_MARGIN = 4  # pixels above and below a panel caption


def feature_grid(
    tensor: Tensor,
    *,
    channels: int | None = 64,
    pick: Pick = "first",
    normalize: Normalize = "tile",
    cmap: str | None = None,
    diverging: bool = False,
    padding: int = 2,
    min_tile: int = 48,
    columns: int | None = None,
    background: RGB = (255, 255, 255),
    tokens: bool = False,
    channels_last: bool = False,
) -> Image.Image:
    """One tile per channel of ``(C, H, W)`` / ``(B, C, H, W)`` maps or ``(B, N, C)`` ViT tokens.

    ``channels`` (None: all) are picked as the first ones, or the top ones by mean activation
    (``top_mean``) or variance (``top_var``), highest first, over the whole batch. Each tile is
    min-max scaled on its own (``normalize="tile"``) or with all tiles (``"shared"``); a
    constant tile is the colormap's middle colour. ``diverging`` (for gradients) maps 0 to the
    middle colour, +-max|x| to the ends, and defaults ``cmap`` to ``RdBu_r`` (else ``viridis``).
    Small maps are enlarged by a whole factor (nearest) to at least ``min_tile`` pixels. Tiles
    sit ``columns`` (default ``ceil(sqrt(k))``) to a row, ``padding`` pixels apart; each image
    of a batch is a block of rows. NaN and +-Inf are drawn in the ``background`` colour.
    ``tokens`` and ``channels_last`` are handed to ``hookscope.core.channels.spatial_maps`` (``True`` for
    ``(B, N, C)`` tokens, and for ``(H, W, C)`` / ``(B, H, W, C)`` maps: Swin's, say).

    Args:
        tensor: ``(C, H, W)`` / ``(B, C, H, W)`` maps, ``(B, N, C)`` tokens with ``tokens=True``, or
            channels-last maps with ``channels_last=True``.
        channels: how many channels get a tile; None draws them all.
        pick: which channels: ``first``, ``top_mean`` or ``top_var``.
        normalize: ``tile`` scales each tile alone, ``shared`` all tiles together.
        cmap: a matplotlib colormap name; None is ``RdBu_r`` when diverging, else ``viridis``.
        diverging: centre the colours on 0 (for gradients).
        padding: pixels between tiles.
        min_tile: small maps are enlarged (nearest) to at least this many pixels.
        columns: tiles per row; None is about a square.
        background: the RGB colour of the padding and of NaN and infinite values.
        tokens: read a 3-D tensor as ``(B, N, C)`` ViT tokens.
        channels_last: read maps as ``(B, H, W, C)`` or ``(H, W, C)``.

    Returns:
        A PIL image, the tiles, each image of the batch a block of rows.

    Raises:
        OptionError: an unknown ``pick`` or ``normalize``, ``channels`` or ``columns`` below 1, or a
            negative ``padding``.
        ShapeError: the tensor cannot be read as maps, or is empty.
        MissingDependencyError: Pillow or matplotlib is not installed.
    """
    _check_options(pick, normalize, channels, padding, columns)
    if channels_last and tensor.dim() == 3:
        tensor = tensor.unsqueeze(0)  # one image's (H, W, C)
    maps = (
        spatial_maps(tensor, tokens=tokens, channels_last=channels_last).detach().to("cpu", torch.float64)
    )  # (B, C, H, W)
    if maps.numel() == 0:
        raise ShapeError(f"nothing to draw: the maps have shape {tuple(maps.shape)}")
    maps = maps[:, pick_channels(maps, channels, pick)]  # (B, k, H, W)
    values = _normalize(maps, shared=normalize == "shared", diverging=diverging)
    factor = max(1, math.ceil(min_tile / min(maps.shape[-2:])))
    values = values.repeat_interleave(factor, dim=-2).repeat_interleave(factor, dim=-1)
    count = values.shape[1]
    canvas = _tile(values, min(columns or math.ceil(math.sqrt(count)), count), padding)
    return _colorize(canvas, cmap or (DIVERGING_CMAP if diverging else DEFAULT_CMAP), background)


def pick_channels(maps: Tensor, channels: int | None, pick: Pick = "first") -> Tensor:
    """Indices of the ``channels`` channels of ``(B, C, H, W)`` maps to draw, in drawing order."""
    _check_options(pick, "tile", channels, 0, None)
    count = maps.shape[1] if channels is None else min(channels, maps.shape[1])
    if pick == "first":
        return torch.arange(count)
    flat = torch.nan_to_num(maps, nan=0.0, posinf=0.0, neginf=0.0).transpose(0, 1).flatten(1)  # (C, B*H*W)
    score = flat.mean(dim=1) if pick == "top_mean" else flat.var(dim=1, correction=0)
    return torch.argsort(score, descending=True, stable=True)[:count]


def overlay(image: Picture, heat: Heat, *, cmap: str = "jet", alpha: float = 0.5) -> Image.Image:
    """``heat`` colour-mapped and blended over ``image``: ``(1 - alpha) * image + alpha * heat``.

    ``image`` is a PIL image, a uint8 ``(H, W, 3)`` array, or a float ``(3, H, W)`` tensor in
    [0, 1] (anything ``to_pil`` takes). ``heat`` is one ``(h, w)`` map (tensor or array; leading
    size-1 axes are dropped) whose values are clipped to [0, 1] and resized (bilinear) to the
    image size.

    Args:
        image: the picture (PIL image, uint8 ``(H, W, 3)`` array, float ``(3, H, W)`` tensor in [0, 1]).
        heat: one ``(h, w)`` map, clipped to [0, 1] and resized to the image.
        cmap: the matplotlib colormap of the heat.
        alpha: the heat's weight in the blend, in [0, 1].

    Returns:
        A PIL RGB image of the image's size.

    Raises:
        OptionError: ``alpha`` is outside [0, 1].
        MissingDependencyError: Pillow, numpy or matplotlib is not installed.
    """
    if not 0.0 <= alpha <= 1.0:
        raise OptionError(f"alpha must be in [0, 1], got {alpha}")
    np = require("numpy")
    picture = np.asarray(to_pil(image).convert("RGB"), dtype=np.float64)  # (H, W, 3)
    colored = _heat_rgb(heat, picture.shape[:2], cmap).astype(np.float64)
    blended = (1.0 - alpha) * picture + alpha * colored
    return _from_array(np.clip(np.rint(blended), 0, 255).astype(np.uint8))


def panel(
    image: Picture,
    heat: Heat,
    *,
    cmap: str = "jet",
    alpha: float = 0.5,
    labels: Sequence[str] | None = ("image", "heatmap", "overlay"),
) -> Image.Image:
    """``image | heatmap | overlay`` side by side, ``PANEL_GAP`` pixels apart, captions on top.

    The picture is ``3 * W + 2 * PANEL_GAP`` wide and ``H`` plus one caption line high
    (``H`` when ``labels`` is None). The heatmap is ``overlay(..., alpha=1)``.

    Args:
        image: the picture (PIL image, uint8 ``(H, W, 3)`` array, float ``(3, H, W)`` tensor in [0, 1]).
        heat: one ``(h, w)`` map, clipped to [0, 1] and resized to the image.
        cmap: the matplotlib colormap of the heat.
        alpha: the heat's weight in the third panel, in [0, 1].
        labels: the three captions; None draws none.

    Returns:
        A PIL RGB image, ``3 * W + 2 * PANEL_GAP`` wide.

    Raises:
        OptionError: ``alpha`` is outside [0, 1].
        MissingDependencyError: Pillow, numpy or matplotlib is not installed.
    """
    require("PIL.Image")
    from PIL import Image, ImageDraw

    base = to_pil(image).convert("RGB")
    parts = [base, overlay(base, heat, cmap=cmap, alpha=1.0), overlay(base, heat, cmap=cmap, alpha=alpha)]
    width, height = base.size
    font = _font(min(max(10, width // 28), 24))
    top = 0 if labels is None else int(font.getbbox("Ag")[3]) + 2 * CAPTION_MARGIN
    sheet = Image.new("RGB", (3 * width + 2 * PANEL_GAP, height + top), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for i, part in enumerate(parts):
        left = i * (width + PANEL_GAP)
        sheet.paste(part, (left, top))
        if labels is not None:
            x = left + max(0.0, (width - draw.textlength(labels[i], font=font)) / 2)
            draw.text((x, CAPTION_MARGIN), labels[i], fill=(40, 40, 40), font=font)
    return sheet


def to_pil(picture: Picture) -> Image.Image:
    """A PIL image from a PIL image, or a tensor / array ``(3, H, W)``, ``(H, W, 3)`` or ``(H, W)``.

    Floats are read as [0, 1] (clipped; NaN is 0), uint8 as [0, 255]. A 3-D input is
    channels-last when its last axis has 3 entries, else channels-first.
    """
    require("PIL.Image")
    from PIL import Image

    if isinstance(picture, Image.Image):
        return picture
    np = require("numpy")
    if isinstance(picture, Tensor):  # bfloat16 has no numpy twin
        picture = picture.detach().cpu().to(torch.float32 if picture.is_floating_point() else picture.dtype)
    array = np.asarray(picture.numpy() if isinstance(picture, Tensor) else picture)
    if array.ndim == 3 and array.shape[-1] != 3 and array.shape[0] == 3:
        array = array.transpose(1, 2, 0)
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] != 3):
        raise ShapeError(f"expected a (3, H, W), (H, W, 3) or (H, W) picture, got shape {tuple(array.shape)}")
    if np.issubdtype(array.dtype, np.floating):
        array = np.rint(np.clip(np.nan_to_num(array), 0.0, 1.0) * 255.0).astype(np.uint8)
    elif array.dtype != np.uint8:
        raise OptionError(f"expected float values in [0, 1] or uint8 in [0, 255], got dtype {array.dtype}")
    return _from_array(array)


def _colormap(name: str) -> Colormap:
    """matplotlib's colormap ``name``, or a ``OptionError`` that lists a few valid names."""
    require("matplotlib")
    import matplotlib

    try:
        return matplotlib.colormaps[name]
    except KeyError:
        raise OptionError(
            f"unknown colormap {name!r}; try 'viridis', 'magma', 'gray', 'jet' or 'RdBu_r' "
            "(any name in matplotlib.colormaps)"
        ) from None


# -- pieces of feature_grid ----------------------------------------------------------------------
def _normalize(maps: Tensor, *, shared: bool, diverging: bool) -> Tensor:
    """``(B, k, H, W)`` values in [0, 1] per tile or shared; NaN where the input is not finite."""
    finite = maps.isfinite()
    dims = (0, 1, 2, 3) if shared else (2, 3)
    if diverging:
        reach = torch.where(finite, maps.abs(), 0.0).amax(dim=dims, keepdim=True)  # max |x|
        values = torch.where(reach > 0, 0.5 + maps / (2 * reach), 0.5)
    else:
        low = torch.where(finite, maps, math.inf).amin(dim=dims, keepdim=True)
        high = torch.where(finite, maps, -math.inf).amax(dim=dims, keepdim=True)
        values = torch.where(high > low, (maps - low) / (high - low), 0.5)  # constant tile: 0.5
    return torch.where(finite, values.clamp(0.0, 1.0), math.nan)


def _tile(values: Tensor, columns: int, padding: int) -> NDArray[Any]:
    """``(B, k, h, w)`` tiles on one ``(rows, cols)`` canvas; NaN (background) between them."""
    np = require("numpy")
    batch, count, h, w = values.shape
    rows = math.ceil(count / columns)
    block = rows * h + (rows - 1) * padding
    gap = BLOCK_GAP * padding
    canvas: NDArray[Any] = np.full((batch * block + (batch - 1) * gap, columns * w + (columns - 1) * padding), np.nan)
    tiles = values.numpy()  # numpy copies: no thread start-up per tile
    for b in range(batch):
        for i in range(count):
            row, col = divmod(i, columns)
            top, left = b * (block + gap) + row * (h + padding), col * (w + padding)
            canvas[top : top + h, left : left + w] = tiles[b, i]
    return canvas


def _colorize(canvas: NDArray[Any], cmap: str, background: RGB) -> Image.Image:
    """``(H, W)`` values in [0, 1] through ``cmap``; NaN pixels in the ``background`` colour."""
    np = require("numpy")
    if len(background) != 3 or not all(isinstance(c, int) and 0 <= c <= 255 for c in background):
        raise OptionError(f"background must be an (r, g, b) tuple of ints in 0..255, got {background!r}")
    missing = np.isnan(canvas)
    rgb = _colormap(cmap)(np.where(missing, 0.0, canvas), bytes=True)[..., :3]
    rgb[missing] = background
    return _from_array(rgb)


# -- pieces of overlay ------------------------------------------------------------------------
def _heat_rgb(heat: Heat, size: tuple[int, int], cmap: str) -> NDArray[Any]:
    """One ``(h, w)`` heatmap, clipped to [0, 1], resized (bilinear) to ``size``, as uint8 RGB."""
    values = torch.as_tensor(heat).detach().to("cpu", torch.float64)
    while values.dim() > 2 and values.shape[0] == 1:
        values = values[0]
    if values.dim() != 2 or values.numel() == 0:
        raise ShapeError(f"heat must be one (h, w) map, got shape {tuple(values.shape)}; pass cam[0] for one image")
    values = torch.nan_to_num(values, nan=0.0).clamp(0.0, 1.0)
    resized = F.interpolate(values[None, None], size=size, mode="bilinear", align_corners=False, antialias=True)
    rgb: NDArray[Any] = _colormap(cmap)(resized[0, 0].clamp(0.0, 1.0).numpy(), bytes=True)[..., :3]
    return rgb


def _from_array(array: NDArray[Any]) -> Image.Image:
    """A uint8 ``(H, W, 3)`` or ``(H, W)`` array as an RGB or L image."""
    require("PIL.Image")
    np = require("numpy")
    from PIL import Image

    return Image.fromarray(np.ascontiguousarray(array))


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's bundled font at ``size`` pixels, or its fixed bitmap font without FreeType."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except ImportError:
        return ImageFont.load_default()


def _check_options(pick: str, normalize: str, channels: int | None, padding: int, columns: int | None) -> None:
    if pick not in PICKS:
        raise OptionError(f"pick={pick!r} is not one of {', '.join(map(repr, PICKS))}")
    if normalize not in NORMALIZE:
        raise OptionError(f"normalize={normalize!r} is not one of {', '.join(map(repr, NORMALIZE))}")
    for name, value in (("channels", channels), ("columns", columns)):
        if value is not None and value < 1:
            raise OptionError(f"{name} must be at least 1 (or None), got {value}")
    if padding < 0:
        raise OptionError(f"padding must be 0 or more, got {padding}")
