"""Batches as ``extract`` meets them: fed to the model, counted in rows, and the target a gradient run
differentiates."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..base.deprecation import warn_renamed
from ..core.tree import flatten
from ..errors import OptionError
from ..explain.targets import call_target, checked

Forward = Callable[[nn.Module, Any], Any]
Loss = Callable[..., Tensor]  # what forward= returned (the model's output) -> a scalar or one value per row


def model_device(model: nn.Module) -> torch.device:
    first = next(itertools.chain(model.parameters(), model.buffers()), None)
    return first.device if first is not None else torch.device("cpu")


def default_forward(device: torch.device) -> Forward:
    def forward(model: nn.Module, batch: Any) -> Any:
        if isinstance(batch, Tensor):
            return model(batch.to(device))
        if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], Tensor):
            return model(batch[0].to(device))
        if isinstance(batch, Mapping):
            return model(**{k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()})
        raise OptionError(
            f"cannot feed a batch of type {type(batch).__name__} to the model; pass a tensor, an (inputs, ...) "
            "tuple, a dict of keyword arguments, or forward=lambda model, batch: model(...)"
        )

    return forward


def unless_empty(batches: Iterator[tuple[int, Any]]) -> Iterator[tuple[int, Any]] | None:
    first = next(batches, None)
    return None if first is None else itertools.chain([first], batches)


def rows_of(batch: Any) -> int | None:
    leaves = flatten(batch, "batch")
    return int(leaves[0][1].shape[0]) if leaves and leaves[0][1].dim() else None


def backward(model: nn.Module, target: Loss, output: Any, batch: Any) -> None:
    """d target / d every trainable parameter, so the backward pass reaches every layer, without writing
    ``param.grad`` (``torch.autograd.grad``, not ``backward()``: the model is left as it was). A target
    of one value per row is summed."""
    trainable = trainable_parameters(model)
    if takes_batch(target):  # the contract before one contract: target(output, batch)
        value = checked(target(output, batch), rows_of(batch), caller="extract()")
    else:
        value = call_target(target, output, rows_of(batch), caller="extract()")
    if not value.requires_grad:
        raise OptionError("target(output) does not depend on the model's output with a gradient; "
                          "compute it from the output (no .detach(), no torch.no_grad())")  # fmt: skip
    torch.autograd.grad(value.sum(), trainable, allow_unused=True)


def warn_if_takes_batch(target: Loss) -> None:
    """``extract``'s ``target(output, batch)`` is the old contract (``hookscope.explain.targets``):
    it works for one release, with a ``DeprecationWarning`` naming the one contract."""
    if takes_batch(target):
        warn_renamed(
            "extract(target=fn(output, batch))",
            "target=fn(output), with forward=fn(model, batch) returning what the target reads "
            "(e.g. (model(batch[0]), batch[1]), the output and the labels)",
            stacklevel=4,
        )


def takes_batch(target: Loss) -> bool:
    """Whether ``target`` is called ``(output, batch)``: it takes two positional arguments (or ``*args``);
    else it is called ``(output)``."""
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    return len(required) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


def trainable_parameters(model: nn.Module) -> list[Tensor]:
    """The parameters a gradient run differentiates, or an error when there are none."""
    trainable: list[Tensor] = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise OptionError("gradients over a dataset need a model with trainable parameters "
                          "(none has requires_grad=True); set requires_grad_(True) on the layers to reach")  # fmt: skip
    return trainable
