"""What to explain: a target turned into one score per image, the thing that is differentiated.

A target is ``None`` (each image's top-1 class), a class index for every image (an int or a 0-dim
tensor, as in Captum), one index per image (a list or a 1-D tensor), or a callable
``output -> (B,) scores`` for anything else (a regression output, a token's logit, a sum of
classes). Scores are the raw outputs (logits), as in the Grad-CAM paper, pytorch-grad-cam and
Captum. The top-1 of tied scores is the lowest class index (``top_classes``). A model that returns
a tuple, dict or ``ModelOutput`` is explained through the tensor at
``output=KEY`` (a key as captures name them, ``out['logits']``, or its first step, ``logits``);
without a key, through its first tensor, with a ``CaptureWarning`` that names it when there are
several.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Union

import torch
from torch import Tensor

from ..core.tree import flatten
from ..errors import CaptureWarning, OptionError, TargetError

Target = Union[int, Sequence[int], Tensor, Callable[[Tensor], Tensor], None]


def logits(output: object, key: str | None = None) -> Tensor:
    """The tensor a target indexes: the output itself, its tensor at ``key``, or its first tensor
    (with a ``CaptureWarning`` naming it when there are several; see ``explained``)."""
    chosen, note = explained(output, key)
    if note is not None:
        warnings.warn(note, CaptureWarning, stacklevel=2)
    return dict(flatten(output))[chosen]


def explained(output: object, key: str | None = None) -> tuple[str, str | None]:
    """The key of the tensor a target indexes in ``output`` (``key`` resolved, or the first), and a
    note naming it when the model returned several tensors and no ``key`` chose one (else None)."""
    keys = [k for k, _ in flatten(output)]
    if not keys:
        raise TargetError(f"the model returned {type(output).__name__} with no tensor in it; nothing to explain")
    if key is not None:
        return choose_key(keys, key, f"the output of the model ({type(output).__name__})", "output"), None
    if len(keys) == 1:
        return keys[0], None
    return keys[0], several_tensors(f"the model's output ({type(output).__name__})", keys, "output")


def choose_key(keys: Sequence[str], wanted: str, what: str, option: str) -> str:
    """The key among ``keys`` that ``wanted`` names: the key itself (``out['logits']``, ``out[0]``,
    ``out.logits``) or its first step without ``out`` (``logits``, ``0``, ``['logits']``)."""
    for candidate in (wanted, f"out{wanted}", f"out[{wanted!r}]", f"out.{wanted}", f"out[{wanted}]"):
        if candidate in keys:
            return candidate
    raise OptionError(f"{what} has no tensor at {option}={wanted!r}; its keys are {', '.join(keys)}")


def several_tensors(what: str, keys: Sequence[str], option: str) -> str:
    """The note for a value holding several tensors, of which the first is used."""
    others = ", ".join(keys[1:4]) + (", ..." if len(keys) > 4 else "")
    return (
        f"{what} holds {len(keys)} tensors; using the first, {keys[0]} (others: {others}); "
        f"pass {option}={keys[1]!r} (or another key) to choose"
    )


def top_classes(output: Tensor, k: int = 1) -> Tensor:
    """``(B, k)`` class indices of a ``(B, C)`` output, highest score first; of classes whose scores
    tie, the lowest index first (as ``torch.argmax`` takes the first maximum). The one ranking the
    top-1 target and a report's predictions share, so a page explains the class it names first."""
    return torch.sort(output, dim=1, descending=True, stable=True).indices[:, :k]


def class_indices(output: Tensor, target: Target) -> Tensor:
    """``(B,)`` class indices for a ``(B, C)`` output; ``None`` picks each row's top-1 (``top_classes``)."""
    if output.dim() != 2:
        raise TargetError(
            f"a class target needs a (batch, classes) output, got shape {tuple(output.shape)}; "
            "pass target=callable(output) -> (batch,) scores instead"
        )
    batch, classes = output.shape
    if target is None:
        return top_classes(output)[:, 0]
    if isinstance(target, int) or (isinstance(target, Tensor) and target.dim() == 0):
        index = torch.full((batch,), int(target), dtype=torch.long, device=output.device)
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


def scores(output: object, target: Target, key: str | None = None) -> tuple[Tensor, Tensor | None]:
    """``(B,)`` scores to differentiate, and the class indices when the target was a class.

    ``key`` picks the tensor of a structured output (see ``logits``)."""
    out = logits(output, key)
    if callable(target) and not isinstance(target, Tensor):
        picked = target(out)
        if not isinstance(picked, Tensor) or picked.reshape(-1).shape != (len(out),):
            raise TargetError("a target callable must return a (batch,) tensor of scores, one per image")
        return picked.reshape(-1), None
    index = class_indices(out, target)
    return out.gather(1, index[:, None]).squeeze(1), index
