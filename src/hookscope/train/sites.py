"""Which modules a watch follows by default, and how it reads what they hold.

``default_sites(model)``: every leaf with parameters and every activation module (``nn.ReLU`` and
its kin, whose outputs show dead units). ``output_tensors(value)``: the tensors of a module's output
(itself, or one level inside a tuple, list, dict or dataclass-like object). ``model_device(model)``:
where its parameters are (the CPU for a model without any).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from ..core.select import select_modules

ACTIVATIONS = "torch.nn.modules.activation"  # the module of nn.ReLU, nn.GELU, nn.Sigmoid, ...


def default_sites(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every leaf with parameters, and every activation module (their outputs show dead units)."""

    def chosen(name: str, module: nn.Module) -> bool:
        leaf = next(module.children(), None) is None
        return leaf and (next(module.parameters(), None) is not None or type(module).__module__ == ACTIVATIONS)

    return select_modules(model, chosen)


def output_tensors(value: Any) -> Iterable[Tensor]:
    """The tensors of a module's output: itself, or those inside a tuple, list or dict (one level)."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, Tensor)]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, Tensor)]
    return [v for v in vars(value).values() if isinstance(v, Tensor)] if hasattr(value, "__dict__") else []


def model_device(model: nn.Module) -> torch.device:
    with contextlib.suppress(StopIteration):
        return next(model.parameters()).device
    return torch.device("cpu")
