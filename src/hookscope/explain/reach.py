"""Whether a score depends on a layer's map: the gradient probe behind cam's default layer.

A layer's map can be all zeros to Grad-CAM although the score depends on the layer's output: on a
class-token model (timm's ConViT, CaiT, PiT) the classifier reads the class token alone, so the
gradient of the score with respect to every patch token of the final norm is exactly 0, while
``d score / d x`` is not. The shapes of a forward pass cannot tell; the autograd graph can, and at
little cost: ``reaching(model, score)`` is a test ``(calls) -> [bool]`` that differentiates the score with
respect to the calls' outputs (``retain_graph=True``, down to the earliest of them) and says, for
each, whether the gradient is non-zero anywhere on the map cam() would read (``as_maps``: tokens on
their patch grid without the class token, channels-last maps in place).
``hookscope.explain.layers.choose_among`` asks it about its usual pick first, so a model whose pick
is reached pays one short backward pass (on a CNN: the pooling and the head); only a pick the score
does not reach makes it ask about every map before it, in one more backward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from ..core.call import Call
from ..core.channels import channel_count, is_channels_last, spatial_maps
from ..core.compiled import unwrap
from ..errors import ShapeError

Reached = Callable[[Sequence[Call]], list[bool]]


def as_maps(model: nn.Module, layer: str, tensor: Tensor) -> Tensor:
    """``tensor``, an output of ``layer``, as the ``(B, C, H, W)`` maps cam() reads.

    Tokens go on their patch grid (class tokens left out); a channels-last output of a layer whose
    own weight states its channels (Swin's final norm, ``(B, H, W, C)``) is read in place.

    Args:
        model: the network ``layer`` belongs to.
        layer: the dotted name of the module that returned ``tensor``.
        tensor: the output, ``(B, C, H, W)``, ``(B, H, W, C)`` or ``(B, N, C)`` tokens.

    Returns:
        ``(B, C, H, W)`` maps.

    Raises:
        ShapeError: ``tensor`` is none of those shapes.
    """
    try:
        module = unwrap(model).get_submodule(layer)
    except AttributeError:  # a name inside a compiled submodule
        module = None
    count = None if module is None else channel_count(module, inside=False)
    return spatial_maps(tensor, tokens=True, channels_last=is_channels_last(tensor.shape, count))


def reaching(model: nn.Module, score: Tensor | None) -> Reached | None:
    """A test of whether ``score`` depends on calls' maps (see the module docstring).

    Args:
        model: the network whose calls are asked about.
        score: the scores ``(B,)`` of the forward pass the calls were recorded in, still in its
            autograd graph; None (no score to differentiate) gives None: no probe.

    Returns:
        ``(calls) -> [bool]``, one backward pass down to the earliest of ``calls``: True where the
        gradient of ``score.sum()`` with respect to a call's first output is non-zero somewhere on
        its map (and for every call when they cannot be differentiated, so a probe never overrules
        the shapes); None when ``score`` is None or not in a graph.
    """
    if score is None or not score.requires_grad:
        return None
    total = score.sum()

    def reached(calls: Sequence[Call]) -> list[bool]:
        outputs = {i: c.get("output") for i, c in enumerate(calls) if c.tensors.get("output")}
        asked = [i for i, o in outputs.items() if o.requires_grad]  # else cut from the graph: never reached
        flags = [False] * len(calls)
        if not asked:
            return flags
        try:
            found = torch.autograd.grad(total, [outputs[i] for i in asked], retain_graph=True, allow_unused=True)
            for i, gradient in zip(asked, found, strict=True):
                flags[i] = gradient is not None and bool(as_maps(model, calls[i].site, gradient).ne(0).any())
        except (RuntimeError, ShapeError):  # not differentiable here: the shapes decide, as before
            return [True] * len(calls)
        return flags

    return reached
