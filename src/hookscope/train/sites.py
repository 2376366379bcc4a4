"""Which modules a watch follows by default, and how it reads what they hold.

``default_sites(model)``: every module that holds a parameter itself (a leaf such as ``nn.Linear``,
and a module with children that holds one too: ``nn.MultiheadAttention``'s ``in_proj_weight``, a
ViT's ``cls_token`` and ``pos_embed``, the model itself when a ``Parameter`` is set on it, whose
site is named ``""``, shown as ``(model)``: ``shown``), and every activation module (``nn.ReLU`` and its kin,
whose outputs show dead units). ``owned_params(sites)``: each parameter once, to the site that owns
it: the deepest selected module holding it (so a selected container counts only the parameters that
no selected module inside it holds; a tied parameter counts at its first site).
``output_tensors(value)``: the tensors of a module's output (itself, or one level inside a tuple,
list, dict or dataclass-like object). ``model_device(model)``: where its parameters are (the CPU
for a model without any).
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
    """Every module holding a parameter itself, and every activation leaf (their outputs show dead units)."""

    def chosen(name: str, module: nn.Module) -> bool:
        leaf = next(module.children(), None) is None
        return next(module.parameters(recurse=False), None) is not None or (
            leaf and type(module).__module__ == ACTIVATIONS
        )

    return select_modules(model, chosen)


def owned_params(sites: list[tuple[str, nn.Module]]) -> dict[str, list[tuple[str, Tensor]]]:
    """Site -> its ``(name, parameter)`` pairs (names relative to the site): each parameter at one site only,
    the deepest one holding it (the first in ``sites`` when unrelated sites share it)."""
    owner: dict[int, tuple[str, str, Tensor]] = {}  # id(param) -> (site, name in the site, param)
    for site, module in sites:
        for name, param in module.named_parameters():
            held = owner.get(id(param))
            if held is None or _inside(site, held[0]):
                owner[id(param)] = (site, name, param)
    out: dict[str, list[tuple[str, Tensor]]] = {site: [] for site, _ in sites}
    for site, name, tensor in owner.values():
        out[site].append((name, tensor))
    return out


def shown(site: str) -> str:
    """A site's name as tables, charts and sinks show it: the model itself (``""``) is ``(model)``."""
    return site or "(model)"


def _inside(site: str, other: str) -> bool:
    """``site`` is a module below ``other`` (the model, ``""``, holds every other)."""
    return site != other and (other == "" or site.startswith(other + "."))


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
