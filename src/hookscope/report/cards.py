"""A layer's card: ``layer_views`` turns captured sites into the page's ``LayerView`` and ``TensorView``.

::

    layers, left_out = layer_views(cap, ("output", "grad_output"), max_layers=64, absent=why)
    layers[0].view("grad_output")      # a TensorView: numbers of the batch, a picture of image 0

A layer is drawn the same way from either source (``build``: a model and an input; ``from_store``:
a store, without the model), here, once:

- Layers in forward order (each site's first call), at most ``max_layers``; the caller names the
  rest. A site called several times (a shared activation) shows its first call and says how
  many calls there were. Sites never called are not drawn.
- A layer holds one ``TensorView`` per kind drawn (the kinds of ``hookscope.core.kinds``) that its
  first call holds, and for each of the others why it holds none. A view of a gradient kind
  (``is_gradient``) is drawn with the diverging colormap: red positive, blue negative, pale zero.
- Numbers are ``summarize`` of the first tensor of the kind, the whole batch; pictures show
  image 0: a grid of its first ``GRID_CHANNELS`` maps for 4-D tensors, bars of its first
  ``MAX_VALUES`` values for 2-D ones (and 4-D ones with 1x1 maps), nothing for 3-D (tokens or
  sequences: the shape cannot say which) and other ranks. Maps wider than ``MAX_TILE`` are
  shrunk (area) before drawing, to keep the page small.

Pillow and matplotlib are imported when a picture is drawn (``pip install 'hookscope[viz]'``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import torch.nn.functional as F
from torch import Tensor

from ..core.call import Call
from ..core.channels import is_channels_last, tokens_to_grid
from ..core.kinds import Kind, is_gradient
from ..core.records import Record, forward_order
from ..errors import ShapeError
from ..stats.summary import summarize
from ..viz.fragments import png_bytes
from ..viz.images import feature_grid
from .content import LayerView, TensorView

if TYPE_CHECKING:
    from PIL.Image import Image

GRID_CHANNELS = 16  # channels drawn in a layer's feature grid
MAX_TILE = 64  # maps larger than this (pixels a side) are shrunk before drawing
MAX_VALUES = 256  # values drawn as bars for a 2-D tensor


def layer_views(
    sites: Mapping[str, Record],
    kinds: Sequence[Kind],
    *,
    max_layers: int,
    absent: Callable[[str], str],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[LayerView], list[str]]:
    """The called sites in forward order, at most ``max_layers``, and the names of the rest.

    Each view holds ``kinds`` of the site's first call; ``absent(kind)`` says why a call holds
    none of a kind when the capture left no reason. ``progress(done, total)`` is called with
    ``done=0`` first, then after each layer. Each record's ``channels`` (its module's channel count,
    from the weights) tells channels-last maps ``(B, H, W, C)`` from channels-first ones when drawing them.
    """
    called = [record for record in forward_order(sites) if record.calls]
    shown = called[:max_layers]
    views = []
    if progress is not None:
        progress(0, len(shown))
    for i, record in enumerate(shown):
        call = record.calls[0]
        views_ = (tensor_view(call, kind, channels=record.channels) for kind in kinds)
        tensors = [view for view in views_ if view is not None]
        held = {view.kind for view in tensors}
        missing: dict[str, str] = {k: call.missing.get(k) or absent(k) for k in kinds if k not in held}
        views.append(LayerView(i, record.name, record.type, len(record.calls), tuple(tensors), missing))
        if progress is not None:
            progress(i + 1, len(shown))
    return views, [record.name for record in called[max_layers:]]


def not_held(kind: str) -> str:
    """Why a call holds none of ``kind`` when the capture left no reason."""
    if is_gradient(kind):
        return "no gradient reached it"
    return {"input": "it received no tensor", "output": "it returned no tensor"}.get(kind, f"it held no {kind}")


def tensor_view(call: Call, kind: Kind, *, channels: int | None = None) -> TensorView | None:
    """The first tensor of ``kind`` in ``call`` as numbers and a picture; None when it holds none.
    ``channels``: the module's channel count, which tells a channels-last map (drawn permuted)."""
    keys = call.keys(kind)
    if not keys:
        return None
    tensor = call.tensors[kind][keys[0]]
    last = is_channels_last(tensor.shape, channels)
    grid, values, note = picture_of(tensor, diverging=is_gradient(kind), channels_last=last, channels=channels)
    return TensorView(
        kind=kind,
        key=keys[0],
        others=len(keys) - 1,
        shape=tuple(tensor.shape),
        dtype=str(tensor.dtype).removeprefix("torch."),
        stats=summarize(tensor).as_dict(),
        grid=grid,
        values=values,
        note=note,
    )


def picture_of(
    tensor: Tensor, *, diverging: bool, channels_last: bool = False, channels: int | None = None
) -> tuple[bytes | None, tuple[float, ...], str]:
    """Image 0 of a layer's tensor as a feature grid (4-D, or ViT tokens on their patch grid), value bars
    (2-D) or nothing, and a caption. ``channels_last``: a 4-D tensor is ``(B, H, W, C)`` (drawn as its
    channels-first permutation); ``channels``: the module's channel count (a ``(B, C, L)`` map is no tokens)."""
    if channels_last and tensor.dim() == 4:
        tensor = tensor.permute(0, 3, 1, 2)  # (B, C, H, W)
    layout = ""
    if tensor.dim() == 3 and (found := token_grid(tensor, channels)) is not None:
        tensor, layout = found
    if tensor.dim() == 4 and tensor.shape[2] * tensor.shape[3] == 1:
        tensor = tensor.flatten(1)  # (B, C, 1, 1): one number per channel reads better as bars
    if tensor.dim() == 2 and tensor.shape[0] and tensor.shape[1]:
        first = tensor[0, :MAX_VALUES].detach().double().cpu()
        values = tuple(float(v) if math.isfinite(v) else 0.0 for v in first.tolist())
        return None, values, f"image 0, values 0-{len(values) - 1} of {tensor.shape[1]}"
    if tensor.dim() != 4:
        what = "tokens or a sequence" if tensor.dim() == 3 else "not maps"
        return None, (), f"{tensor.dim()}-D output ({what}): no picture"
    maps = tensor[:1, :GRID_CHANNELS].detach().cpu().double()  # (1, k, H, W)
    side = max(maps.shape[2:])
    if side > MAX_TILE:
        size = tuple(max(1, round(s * MAX_TILE / side)) for s in maps.shape[2:])
        maps = F.interpolate(maps, size=size, mode="area")
    try:
        grid = feature_grid(maps[0], channels=None, diverging=diverging)
    except ShapeError as err:
        return None, (), f"no picture: {err}"
    shrunk = (
        f", {tensor.shape[2]}x{tensor.shape[3]} maps drawn at {maps.shape[2]}x{maps.shape[3]}"
        if side > MAX_TILE
        else ""
    )
    return png(grid), (), f"image 0, channels 0-{maps.shape[1] - 1} of {tensor.shape[1]}{shrunk}{layout}"


def token_grid(tensor: Tensor, channels: int | None) -> tuple[Tensor, str] | None:
    """``(B, P + h*w, D)`` tokens as ``(B, D, h, w)`` maps on their patch grid, as the CAMs read them
    (``core.channels.tokens_to_grid``), and the caption's words; None for a sequence that is no grid."""
    if channels is not None and tensor.shape[1] == channels:
        return None  # (B, C, L): a Conv1d's maps
    try:
        maps = tokens_to_grid(tensor)
    except ShapeError:
        return None
    h, w = maps.shape[2:]
    if h < 4:  # tokens_to_grid's guess is unambiguous from 4 x 4 patches on
        return None
    prefix = tensor.shape[1] - h * w
    skipped = f" after {prefix} leading token{'s' if prefix > 1 else ''}" if prefix else ""
    return maps, f"; tokens drawn as a {h}x{w} patch grid{skipped}"


def png(image: Image) -> bytes:
    """``image`` as PNG bytes."""
    return png_bytes(image)
