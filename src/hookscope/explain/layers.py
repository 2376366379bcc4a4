"""Which layer a CAM reads when none is named, and how to say which, in words a user knows.

``choose_among(model, cap)`` picks from the calls of a capture of every module (``cam()`` reads the
capture of its own forward pass, so it runs no extra one); ``choose_layer(model, x)`` runs a probe
pass (shapes only, no memory) for it. The pick:

- the last module call (in the order calls return) whose output is a spatial map ``(B, C, H, W)``
  larger than 1x1: ``layer4`` on a ResNet, the head's activation on an EfficientNet. Its channels
  must be where a CAM reads them: a 4-D output whose second axis is not the channel count of the
  module is not one. A channels-last output ``(B, H, W, C)`` (its last axis is the module's channel
  count, ``hookscope.core.channels.channel_count``) is a map read in place: timm's Swin ends in
  one, its final ``norm``, which the pooled classifier reads (the block outputs before it are
  containers whose channels no weight of theirs states). A leaf with no
  weight keeps the layout of the call before it when it keeps its shape (an activation, a drop
  path), else is read with the channels of the last call with a weight: an attention's
  ``(B, heads, N, N)`` weights through a ``Dropout`` are not a map. A container's channels are
  those of the last call inside it with a weight (else of its last projection), and only rule
  out channels-last (GoogLeNet's ``inception5b`` returns more: its branches concatenated);
- unless that last map is a token grid ``(B, N, C)`` (a vision transformer: its last spatial map is
  the patch embedding, which is not what anyone means). Then it is the last token grid that
  returns before the last attention module runs, outside it: the input of the last block's
  attention (``encoder.layers.encoder_layer_11.ln_1`` on torchvision's ViT, ``blocks[-1].norm1``
  on timm's). Later token grids are no use: the classifier reads the class token alone, so the
  gradient of the score with respect to every patch token after the last attention is zero and
  the map would be flat.

``LayerChoice.words`` names the choice for people: the module, which of its calls when it runs
more than once and the module that ran just before it, and the block it belongs to.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import NamedTuple

from torch import Tensor, nn

from ..core.capture import shapes_of
from ..core.channels import channel_count, is_channels_last, tokens_to_grid
from ..core.compiled import unwrap
from ..core.records import Call, Record
from ..core.select import Selector, select_modules
from ..errors import SelectionError, ShapeError

log = logging.getLogger("hookscope")


class LayerChoice(NamedTuple):
    """The layer (and call) a CAM reads, and a sentence naming it."""

    layer: str
    call: int
    words: str


def one_module(model: nn.Module, select: Selector | None) -> str | None:
    """The name of the one module ``select`` matches (None stays None: cam() picks the layer); a
    ``SelectionError`` when it matches several."""
    if select is None:
        return None
    matched = [name for name, _ in select_modules(model, select)]
    if len(matched) > 1:
        shown = ", ".join(matched[:4]) + (", ..." if len(matched) > 4 else "")
        raise SelectionError(
            f"cam() reads one module, but select={select!r} matched {len(matched)} ({shown}); "
            f"pick one, e.g. select={matched[-1]!r}"
        )
    return matched[0]


def pick_layer(model: nn.Module, x: Tensor) -> tuple[str, int]:
    """The (name, call) a CAM reads without ``select=`` (``choose_layer`` says how, and logs why).

    Args:
        model: the network.
        x: an input batch it runs once (under no_grad, outputs recorded as shapes only).

    Returns:
        ``(name, call)``, the module's dotted name and which of its calls (0-based) the CAM reads.

    Raises:
        SelectionError: no module returns a spatial map or tokens on a patch grid.
    """
    choice = choose_layer(model, x)
    return choice.layer, choice.call


def choose_layer(model: nn.Module, x: Tensor) -> LayerChoice:
    """The layer a CAM reads without ``select=`` (see the module docstring), logged on "hookscope"."""
    return choose_among(model, shapes_of(model, x))


def choose_among(model: nn.Module, sites: Mapping[str, Record]) -> LayerChoice:
    """The layer a CAM reads, from the calls of one forward pass that recorded every module's output."""
    calls = sorted((c for name, r in sites.items() if name for c in r.calls), key=lambda c: c.order)
    spatial, channels_last = _spatial_maps(model, calls), _channels_last_maps(model, calls)
    maps = [c for c in calls if id(c) in spatial or id(c) in channels_last or _is_token_grid(c)]
    if not maps:
        raise SelectionError(
            f"no module of {type(model).__name__} returns a (B, C, H, W) map larger than 1x1 (channels first) "
            "or (B, N, C) tokens on a patch grid; pass select=NAME"
        )
    chosen, why = maps[-1], "the last spatial map"
    if id(chosen) in channels_last:
        why = "the last spatial map (channels last)"
    elif id(chosen) not in spatial:
        attentions = [c for c in calls if "attention" in _type(model, c.site).lower()]
        if attentions:
            last = attentions[-1]
            before = [c for c in maps if c.order < last.order and not _inside(c.site, last.site)]
            if before:
                chosen, why = before[-1], f"the tokens the last attention (`{last.site}`) reads"
    words = _words(chosen, calls, why)
    log.info("hookscope.cam: heatmaps at %s, output %s", words, tuple(chosen.get("output").shape))
    return LayerChoice(chosen.site, chosen.index, words)


def _words(chosen: Call, calls: list[Call], why: str) -> str:
    """```_swish` (the second of 2 calls, after `_bn1`), the last spatial map``: a layer in terms a user knows."""
    name = f"`{chosen.site}`"
    count = sum(1 for c in calls if c.site == chosen.site)
    if count > 1:
        earlier = [c for c in calls if c.order < chosen.order and not _inside(c.site, chosen.site)]
        after = f", after `{earlier[-1].site}`" if earlier else ""
        name += f" (the {ordinal(chosen.index + 1)} of {count} calls{after})"  # not "call 1 of 2": 0- or 1-based?
    parent = chosen.site.rpartition(".")[0]
    block = f", in block `{parent}`" if parent else ""
    return f"{name}{block}: {why}"


def ordinal(n: int) -> str:
    """``1`` -> ``first``, ``2`` -> ``second``, ..., ``11`` -> ``11th``, ``22`` -> ``22nd``."""
    words = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
    if 1 <= n <= len(words):
        return words[n - 1]
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _type(model: nn.Module, site: str) -> str:
    try:
        return type(unwrap(model).get_submodule(site)).__name__
    except AttributeError:  # a name inside a compiled submodule
        return ""


def _inside(site: str, container: str) -> bool:
    return site.startswith(container + ".")


def _spatial_maps(model: nn.Module, calls: list[Call]) -> set[int]:
    """The ids of the calls (in return order) whose output is a channels-first map, as the module doc says."""
    root, found = unwrap(model), set()
    weighted: list[tuple[str, int]] = []  # (site, channels) of the calls with a weight, in return order
    last: tuple[tuple[int, ...], bool] = ((), False)  # the call before: its output's shape, whether a map
    for call in calls:
        module = _module(root, call.site)
        shape = tuple(call.get("output").shape) if call.tensors.get("output") else ()
        own = None if module is None else channel_count(module, inside=False)  # the layer's own weight
        if own is not None:
            ok = _channels_first(shape, own, strict=True)
            weighted.append((call.site, own))
        elif module is None or next(module.children(), None) is None:  # no weight: the input's layout
            ok = last[1] if shape == last[0] else _channels_first(shape, weighted[-1][1] if weighted else None)
        else:  # a container: the last layer inside it with a weight
            inner = next((n for site, n in reversed(weighted) if _inside(site, call.site)), None)
            inner = inner if inner is not None else channel_count(module)  # its layers run functionally
            ok = _channels_first(shape, inner, strict=False)
        ok = ok and _is_spatial(call)
        found |= {id(call)} if ok else set()
        last = (shape, ok)
    return found


def _channels_last_maps(model: nn.Module, calls: list[Call]) -> set[int]:
    """The ids of the calls whose output is a channels-last map ``(B, H, W, C)`` larger than 1x1, ``C`` being
    the channel count of the module's own weight (a norm's, a linear map's)."""
    root, found = unwrap(model), set()
    for call in calls:
        module = _module(root, call.site)
        if module is None or not call.tensors.get("output"):
            continue
        first = call.get("output")
        count = channel_count(module, inside=False)
        if first.dim() == 4 and first.shape[1] * first.shape[2] > 1 and is_channels_last(first.shape, count):
            found.add(id(call))
    return found


def _channels_first(shape: tuple[int, ...], count: int | None, *, strict: bool = True) -> bool:
    """Whether a 4-D output of a module with ``count`` channels has them on axis 1 (``strict``: must;
    else, for a container whose last layer need not give its channels, only not channels-last)."""
    if len(shape) != 4 or count is None:
        return len(shape) == 4
    if is_channels_last(shape, count):
        return False
    return shape[1] == count or not strict


def _module(root: nn.Module, site: str) -> nn.Module | None:
    try:
        return root.get_submodule(site)
    except AttributeError:  # a name inside a compiled submodule
        return None


def _is_spatial(call: Call) -> bool:
    if not call.tensors.get("output"):
        return False
    first = call.get("output")
    return first.dim() == 4 and first.shape[2] * first.shape[3] > 1 and first.is_floating_point()


def _is_token_grid(call: Call) -> bool:
    """A (B, N, C) floating output whose N tokens lie on a patch grid larger than 1x1 (class token aside)."""
    if not call.tensors.get("output"):
        return False
    first = call.get("output")
    if first.dim() != 3 or not first.is_floating_point() or first.shape[1] < 4:
        return False
    try:
        grid = tokens_to_grid(first[:1])  # meta tensors: shapes only
    except ShapeError:
        return False
    return bool(grid.shape[2] * grid.shape[3] > 1)
