"""What to explain: a target turned into one score per image, the thing that is differentiated.

A target is ``None`` (each image's top-1 class), a class index for every image (an int or a 0-dim
tensor, as in Captum), one index per image (a list or a 1-D tensor), or a callable for anything
else (a regression output, a token's logit, a sum of classes). Scores are the raw outputs
(logits), as in the Grad-CAM paper, pytorch-grad-cam and Captum. The top-1 of tied scores is the
lowest class index (``top_classes``). A model that returns a tuple, dict or ``ModelOutput`` is
explained through the tensor at ``output=KEY`` (a key as captures name them, ``out['logits']``,
or its first step, ``logits``); without a key, a class target reads its first tensor, with a
``CaptureWarning`` that names it when there are several.

The one contract of a callable target, in every function that takes ``target=`` (``cam``,
``attribute``, ``token_attribution``, ``patch_sweep``, ``extract``; ``call_target`` checks it)::

    target(output) -> Tensor    # (B,): one value per row, or (): one value for the batch

``output`` is the model's output: its tensor at ``output=KEY`` when the function was given one,
else the output as the model returned it (a tensor, tuple, dict or ``ModelOutput``). Where
gradients are taken, the sum of the values is differentiated (one value per row: each row's own
gradient); ``token_attribution`` explains that sum, ``patch_sweep`` measures the mean, ``extract``
runs its backward pass. ``cam`` and ``attribute`` explain each row: they take one value per row
(a batch of one may return a scalar). Anything else (a float, a tensor of another shape) is a
``TargetError`` naming the shape. Inputs the model does not return (labels) reach ``extract``'s
target through ``forward=``: ``target`` gets whatever ``forward(model, batch)`` returns.
Contracts of earlier versions work for one release with a ``DeprecationWarning``: a callable
given the first tensor of a structured output (``cam``, ``attribute``), one returning a float
(``patch_sweep``), ``extract``'s ``target(output, batch)``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Union

import torch
from torch import Tensor

from ..base.deprecation import warn_renamed
from ..core.tree import flatten
from ..errors import CaptureWarning, OptionError, TargetError

Target = Union[int, Sequence[int], Tensor, Callable[[Any], Tensor], None]
_OLD_CALL = (TypeError, KeyError, IndexError, AttributeError)  # an old-contract callable given the whole output


def call_target(target: Callable[[Any], Any], output: object, rows: int | None, *, key: str | None = None,
                per_row: bool = False, caller: str = "this call") -> Tensor:  # fmt: skip
    """``target(output)`` under the one contract (module doc): a ``(rows,)`` tensor, or ``()`` unless
    ``per_row``. ``key`` picks the tensor of a structured output the callable gets; ``rows=None``:
    a row count not known (any 1-D tensor is one value per row)."""
    if key is not None:
        value = target(logits(output, key))
    elif isinstance(output, Tensor):
        value = target(output)
    else:
        value = _whole_or_first(target, output, caller)
    return checked(value, rows, per_row=per_row, caller=caller)


def checked(value: object, rows: int | None, *, per_row: bool = False, caller: str = "this call") -> Tensor:
    """What a callable target returned, held to the one contract (see ``call_target``)."""
    if isinstance(value, (float, int)) and not isinstance(value, bool) and not per_row:
        warn_renamed(f"a target of {caller} returning a {type(value).__name__}", "one returning a tensor", stacklevel=3)
        value = torch.tensor(float(value))
    if not isinstance(value, Tensor):
        raise TargetError(f"the target of {caller} must return a tensor (one value per row, or one value), "
                          f"got {type(value).__name__}")  # fmt: skip
    if value.numel() == 1 and (rows == 1 or not per_row):
        return value.reshape(1) if per_row else value.reshape(())
    if value.dim() == 1 and len(value) == (len(value) if rows is None else rows):
        return value
    wanted = f"({rows or 'B'},), one value per row" + ("" if per_row else ", or (), one value for the batch")
    raise TargetError(f"the target of {caller} returned shape {tuple(value.shape)}; return {wanted}")


def rows(output: object, key: str | None = None) -> int:
    """The rows of the model's output: those of its tensor at ``key``, else of its first tensor."""
    return len(dict(flatten(output))[explained(output, key)[0]])


def _whole_or_first(target: Callable[[Any], Any], output: object, caller: str) -> Any:
    """A structured output goes whole to the callable; one written for its first tensor (the contract
    of ``cam`` and ``attribute`` before) still gets that, with a ``DeprecationWarning``, for one release."""
    try:
        return target(output)
    except _OLD_CALL as err:
        first, _ = explained(output)
        try:
            value = target(dict(flatten(output))[first])
        except Exception:
            raise err from None
        warn_renamed(f"a target of {caller} that reads the first tensor ({first}) of the model's output",
                     f'target(output) on the whole output, or output="{short_key(first)}"', stacklevel=4)  # fmt: skip
        return value


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
        f'pass {option}="{short_key(keys[1])}" (or another key) to choose'
    )


def short_key(key: str) -> str:
    """``key`` as ``output=`` and ``key=`` take it: its first step without ``out`` (``out['logits']`` ->
    ``logits``, ``out[1]`` -> ``1``, ``out.hidden`` -> ``hidden``), a deeper key less its ``out``
    (``out['a'][0]`` -> ``['a'][0]``); ``choose_key`` reads each back."""
    step = re.fullmatch(r"out(?:\[(['\"]?)([^\]'\"]+)\1\]|\.(\w+))", key)
    if step:
        return str(step.group(2) or step.group(3))
    return key.removeprefix("out") if key.startswith(("out[", "out.")) else key


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


def scores(
    output: object, target: Target, key: str | None = None, caller: str = "cam() or attribute()"
) -> tuple[Tensor, Tensor | None]:
    """``(B,)`` scores to differentiate, and the class indices when the target was a class.

    ``key`` picks the tensor of a structured output (see ``logits``)."""
    if callable(target) and not isinstance(target, Tensor):
        return call_target(target, output, rows(output, key), key=key, per_row=True, caller=caller), None
    out = logits(output, key)
    index = class_indices(out, target)
    return out.gather(1, index[:, None]).squeeze(1), index
