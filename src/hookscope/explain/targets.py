"""What to explain: a target turned into one score per image, the thing that is differentiated.

A target is ``None`` (each image's top-1 class), a class index for every image, one index per
image (a list or a 1-D tensor), or a callable ``output -> (B,) scores`` for anything else (a
regression output, a token's logit, a sum of classes). Scores are the raw outputs (logits), as
in the Grad-CAM paper, pytorch-grad-cam and Captum; a model that returns a tuple, dict or
``ModelOutput`` is explained through its first tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Union

import torch
from torch import Tensor

from ..core.tree import flatten
from ..errors import TargetError

Target = Union[int, Sequence[int], Tensor, Callable[[Tensor], Tensor], None]


def logits(output: object) -> Tensor:
    """The tensor a target indexes: the output itself, or its first tensor."""
    leaves = flatten(output)
    if not leaves:
        raise TargetError(f"the model returned {type(output).__name__} with no tensor in it; nothing to explain")
    return leaves[0][1]


def class_indices(output: Tensor, target: Target) -> Tensor:
    """``(B,)`` class indices for a ``(B, C)`` output; ``None`` picks each row's top-1."""
    if output.dim() != 2:
        raise TargetError(
            f"a class target needs a (batch, classes) output, got shape {tuple(output.shape)}; "
            "pass target=callable(output) -> (batch,) scores instead"
        )
    batch, classes = output.shape
    if target is None:
        return output.argmax(dim=1)
    if isinstance(target, int):
        index = torch.full((batch,), target, dtype=torch.long, device=output.device)
    elif isinstance(target, (Tensor, Sequence)):
        index = torch.as_tensor(target if isinstance(target, Tensor) else list(target), device=output.device)
        index = index.long().flatten()
        if index.numel() != batch:
            raise TargetError(f"got {index.numel()} targets for a batch of {batch}; pass one per image or one int")
    else:
        raise TargetError(f"target={target!r} is not a class index, a list of them, or a callable")
    bad = index[(index < 0) | (index >= classes)]
    if bad.numel():
        raise TargetError(f"target {bad[0].item()} is not a class of this output (0..{classes - 1})")
    return index


def scores(output: object, target: Target) -> tuple[Tensor, Tensor | None]:
    """``(B,)`` scores to differentiate, and the class indices when the target was a class."""
    out = logits(output)
    if callable(target) and not isinstance(target, Tensor):
        picked = target(out)
        if not isinstance(picked, Tensor) or picked.reshape(-1).shape != (len(out),):
            raise TargetError("a target callable must return a (batch,) tensor of scores, one per image")
        return picked.reshape(-1), None
    index = class_indices(out, target)
    return out.gather(1, index[:, None]).squeeze(1), index
