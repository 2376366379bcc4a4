"""Batches as ``extract`` meets them: fed to the model, counted in rows, and the loss a gradient run takes."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..core.tree import flatten
from ..errors import OptionError

Forward = Callable[[nn.Module, Any], Any]
Loss = Callable[[Any, Any], Tensor]  # (model output, batch) -> a scalar


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


def backward(model: nn.Module, loss: Loss, output: Any, batch: Any) -> None:
    """d loss / d every trainable parameter, so the backward pass reaches every layer, without writing
    ``param.grad`` (``torch.autograd.grad``, not ``backward()``: the model is left as it was)."""
    trainable = trainable_parameters(model)
    value = loss(output, batch)
    if not isinstance(value, Tensor) or value.numel() != 1:
        got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise OptionError(f"loss(output, batch) must return a scalar tensor, got {got}; reduce it, e.g. with .sum()")
    if not value.requires_grad:
        raise OptionError("loss(output, batch) does not depend on the model's output with a gradient; "
                          "compute it from the output (no .detach(), no torch.no_grad())")  # fmt: skip
    torch.autograd.grad(value.reshape(()), trainable, allow_unused=True)


def trainable_parameters(model: nn.Module) -> list[Tensor]:
    """The parameters a gradient run differentiates, or an error when there are none."""
    trainable: list[Tensor] = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise OptionError("gradients over a dataset need a model with trainable parameters "
                          "(none has requires_grad=True); set requires_grad_(True) on the layers to reach")  # fmt: skip
    return trainable
