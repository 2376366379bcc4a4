"""A model's repeated blocks (the unit it is built by repeating): what the selector ``":blocks"`` picks.

``blocks(model)`` looks for them from the top down (its docstring says how); ``unique(pairs)``
keeps each module once, under the first of its names.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

from torch import nn

from ..errors import SelectionError
from .compiled import unwrap


def blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The repeated blocks of ``model`` (the unit it is built by repeating), or [] when it has none.

    Looked for from the top down. A *stage* is passed through: an ``nn.Sequential``, ``nn.ModuleList``
    or ``nn.ModuleDict`` holding a module with children, or a class named ``...Stage`` (torchvision's
    ``AnyStage``, timm's stages). A *block* is a module with children and at least two layers (modules
    owning a 2-D or larger weight: convolutions, linear maps, embeddings). At each level, the blocks are
    every block of a class that a stage holds twice in a row (a ResNet's ``layer1.0``, an
    EfficientNet's ``features.1.0`` ... ``features.7.0``, MNASNet's one-block stage too), and the
    block alone in a stage of its own beside them (timm's EfficientNet and MobileNetV3 begin with a
    ``DepthwiseSeparableConv`` as ``blocks.0.0``), or, when each of those holds such a run of its
    own, those runs (torchvision's MaxViT: ``blocks.0`` ... ``blocks.3`` are its stages, each a
    list of ``MaxVitLayer``, ``blocks.0.layers.0`` ...); else the blocks found below it (BERT's
    ``encoder.layer.N``, T5's two stacks); else the blocks of the most repeated class at that level
    and those built of the same kinds of layer (GoogLeNet's ``inception3a`` ... ``inception5b``,
    Inception v3's ``Mixed_5b`` ... ``Mixed_7c`` of five classes; not the auxiliary classifier, which
    adds a ``Linear``). Before the blocks below a level are looked for, a block that is the one entry
    of an ``nn.ModuleList`` is a block (a stack built with one layer: ``nn.Transformer``'s
    ``encoder.layers.0`` and ``decoder.layers.0``). A model with none of these takes, at its top level,
    the units of one layer that a stage repeats (a toy stack of ``Linear`` + ``ReLU`` blocks).
    """
    if not isinstance(model, nn.Module):
        raise SelectionError(f"expected a torch.nn.Module, got {type(model).__name__}")
    root = unwrap(model)
    return unique(_blocks_under("", root) or _repeated(_units("", root, staged=_is_stage(root)), "", layers=1))


Unit = tuple[str, nn.Module, bool]  # name, module, whether a stage holds it


def _blocks_under(prefix: str, module: nn.Module) -> list[tuple[str, nn.Module]]:
    """The blocks of ``module`` (see ``blocks``), named from ``prefix``."""
    level = _units(prefix, module, staged=_is_stage(module))
    repeated = _repeated(level, prefix, layers=2)
    if repeated:
        inner = [_repeated(_units(f"{name}.", m, staged=False), f"{name}.", layers=2) for name, m in repeated]
        return [pair for found in inner for pair in found] if all(inner) else repeated  # stages named blocks
    lone = _alone_in_list(prefix, module, level)
    if lone:
        return lone
    below = [pair for name, m, _ in level for pair in _blocks_under(f"{name}.", m)]
    if below:
        return below
    candidates = [(name, m) for name, m, _ in level if _layers(m) >= 2 and not isinstance(m, _CONTAINERS)]
    common = [cls for cls, count in Counter(type(m) for _, m in candidates).most_common(1) if count >= 2]
    if not common:
        return []
    kinds = _kinds(next(m for _, m in candidates if type(m) is common[0]))
    return [(name, m) for name, m in candidates if _kinds(m) == kinds]


def _repeated(level: list[Unit], prefix: str, *, layers: int) -> list[tuple[str, nn.Module]]:
    """The units of ``level`` of each class that a stage holds twice in a row, with ``layers`` layers or more,
    and beside them a block (two layers or more) alone in a stage of its own below ``prefix``."""
    runs = {type(m) for (_, m, s), (_, n, t) in pairwise(level) if s and t and type(m) is type(n)}
    classes = {type(m) for _, m, _ in level if type(m) in runs and _layers(m) >= layers}
    if not classes:
        return []
    stages = Counter(name.rpartition(".")[0] for name, _, _ in level)
    alone = {
        name for name, m, staged in level
        if staged and stages[name.rpartition(".")[0]] == 1 and name.rpartition(".")[0] != prefix.rstrip(".")
        and _layers(m) >= max(layers, 2)
    }  # fmt: skip
    return [(name, m) for name, m, _ in level if type(m) in classes or name in alone]


def _alone_in_list(prefix: str, module: nn.Module, level: list[Unit]) -> list[tuple[str, nn.Module]]:
    """The blocks (two layers or more) of ``level`` that are the one entry of an ``nn.ModuleList``: a stack
    built with one layer (``nn.Transformer(num_encoder_layers=1)``'s ``encoder.layers.0``)."""
    found = []
    for name, m, staged in level:
        parent = name[len(prefix) :].rpartition(".")[0]
        holder = module.get_submodule(parent) if staged and parent else None
        if isinstance(holder, nn.ModuleList) and len(holder) == 1 and _layers(m) >= 2:
            found.append((name, m))
    return found


def _units(prefix: str, module: nn.Module, *, staged: bool) -> list[Unit]:
    """The children of ``module`` that have children, stages opened up, in model order."""
    found: list[Unit] = []
    for name, child in module.named_children():
        if next(child.children(), None) is None:
            continue
        if _is_stage(child):
            found.extend(_units(f"{prefix}{name}.", child, staged=True))
        else:
            found.append((f"{prefix}{name}", child, staged))
    return found


_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def _is_stage(module: nn.Module) -> bool:
    """A container of modules with children, or a class its library calls a stage."""
    if type(module).__name__.endswith("Stage"):
        return True
    return isinstance(module, _CONTAINERS) and any(next(c.children(), None) is not None for c in module.children())


def _layers(module: nn.Module) -> int:
    """How many modules under ``module`` hold a weight of two or more dimensions of their own."""
    return sum(1 for m in module.modules() if any(p.dim() >= 2 for p in m.parameters(recurse=False)))


def _kinds(module: nn.Module) -> frozenset[type[nn.Module]]:
    """The classes of the layers under ``module`` (``Conv2d``; ``Conv2d`` and ``Linear``)."""
    return frozenset(type(m) for m in module.modules() if any(p.dim() >= 2 for p in m.parameters(recurse=False)))


def unique(pairs: list[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """Each module once, under the first of its names."""
    first: dict[int, tuple[str, nn.Module]] = {}
    for name, module in pairs:
        first.setdefault(id(module), (name, module))
    return list(first.values())
