"""Which layer a CAM reads when none is named, and how to say which, in words a user knows.

``choose_among(model, cap)`` picks from the calls of a capture of every module (``cam()`` reads the
capture of its own forward pass, so it runs no extra one); ``choose_layer(model, x)`` runs a probe
pass for it (outputs kept by reference, gradients on). Outputs whose first axis is not the batch
are never picked (timm's Sequencer2D runs an LSTM over rows: ``(B * H, W, C)``). The pick:

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
  the map would be flat. An attention is a module whose class or own name says ``attention`` or
  ``attn`` (timm's CaiT ``ClassAttn``, ConViT's ``blocks.N.attn``), the innermost when they nest;
- and then the gradient probe (``hookscope.explain.reach``): when the score does not depend on the
  pick's map (PiT's last stage returns a map its head never reads: only the class token goes on),
  the last map before it, outside any attention, that the score depends on. One short backward
  pass when the pick is reached (the pooling and the head on a CNN), one more down to the earliest
  map when it is not; shapes alone cannot tell (the final norm of a class-token model has the
  shape of a map and a zero gradient on it).

``LayerChoice.words`` names the choice for people: the module, which of its calls when it runs
more than once and the module that ran just before it, and the block it belongs to.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..core.call import Call
from ..core.capture import capture
from ..core.channels import channel_count, is_channels_last, tokens_to_grid
from ..core.compiled import unwrap
from ..core.records import Record
from ..core.select import Selector, select_modules
from ..errors import CaptureWarning, HookscopeError, SelectionError, ShapeError
from .reach import Reached, reaching
from .targets import scores

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
    """The layer a CAM reads without ``select=`` (see the module docstring), logged on "hookscope".

    One forward pass that keeps every module's output by reference, and the gradient probe
    (``hookscope.explain.reach``) on the top-1 class score: a backward pass down to the pick."""
    with torch.inference_mode(False), torch.enable_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)
        leaf = x.detach().clone().requires_grad_(x.is_floating_point())  # a normal tensor, also from an inference one
        with capture(model, lambda name, module: True, detach=False, clone=False) as live:
            out = model(leaf)
        return choose_among(model, live, batch=len(x), reached=reaching(model, top_score(out)))


def top_score(output: object) -> Tensor | None:
    """The top-1 class scores ``(B,)`` of a classifier's output; None when it is not one."""
    try:
        return scores(output, None)[0]
    except HookscopeError:
        return None


def choose_among(
    model: nn.Module, sites: Mapping[str, Record], *, batch: int | None = None, reached: Reached | None = None
) -> LayerChoice:
    """The layer a CAM reads, from the calls of one forward pass that recorded every module's output:
    ``batch`` leaves out outputs whose first axis is not the batch, ``reached`` (``reach.reaching``)
    those whose map the score does not depend on."""
    calls = sorted((c for name, r in sites.items() if name for c in r.calls), key=lambda c: c.order)
    spatial, channels_last = _spatial_maps(model, calls), _channels_last_maps(model, calls)
    maps = [c for c in calls if id(c) in spatial or id(c) in channels_last or _is_token_grid(c)]
    maps = [c for c in maps if batch is None or c.get("output").shape[0] == batch]  # an LSTM's (B * H, W, C)
    if not maps:
        raise SelectionError(
            f"no module of {type(model).__name__} returns a (B, C, H, W) map larger than 1x1 (channels first) "
            "or (B, N, C) tokens on a patch grid; pass select=NAME"
        )
    attentions = [c for c in calls if _is_attention(model, c.site)]
    chosen, why = _preferred(maps, attentions, channels_last, spatial)
    if reached is not None and not reached([chosen])[0]:
        inner = [c for c in maps if c.order < chosen.order and not any(_inside(c.site, a.site) for a in attentions)]
        earlier = next((c for c, ok in reversed(list(zip(inner, reached(inner), strict=True))) if ok), None)
        if earlier is not None:
            why = f"the last map the score depends on (not `{chosen.site}`'s: its gradient there is 0)"
            chosen = earlier
    words = _words(chosen, calls, why)
    log.info("hookscope.cam: heatmaps at %s, output %s", words, tuple(chosen.get("output").shape))
    return LayerChoice(chosen.site, chosen.index, words)


def _preferred(
    maps: list[Call], attentions: list[Call], channels_last: set[int], spatial: set[int]
) -> tuple[Call, str]:
    """The pick by shapes alone, and why (see the module docstring)."""
    chosen, why = maps[-1], "the last spatial map"
    if id(chosen) in channels_last:
        why = "the last spatial map (channels last)"
    elif id(chosen) not in spatial and attentions:
        last = [a for a in attentions if not any(_inside(b.site, a.site) for b in attentions)][-1]  # not its block
        before = [c for c in maps if c.order < last.order and not _inside(c.site, last.site) and _is_token_grid(c)]
        if before:  # tokens: not a module the attention calls on its heads (CoaT's shared `crpe4`, (B, h, N, C))
            chosen, why = before[-1], f"the tokens the last attention (`{last.site}`) reads"
    return chosen, why


def _is_attention(model: nn.Module, site: str) -> bool:
    """An attention module: its class or its own name says so (``Attention``, ``ClassAttn``, timm's
    ConViT ``GPSA`` as ``blocks.0.attn``)."""
    words = (_type(model, site).lower(), site.rpartition(".")[2].lower())
    return any("attention" in w or "attn" in w for w in words) and not site.endswith(("_drop", "_dropout"))


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
    else, for a container whose last layer need not give its channels: not channels-last, and at least
    ``count`` of them, as branches concatenated give; CoaT's ``crpe`` returns ``(B, heads, N, C)``)."""
    if len(shape) != 4 or count is None:
        return len(shape) == 4
    if is_channels_last(shape, count):
        return False
    return shape[1] == count or (not strict and shape[1] > count)  # more: branches concatenated; fewer: heads


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
