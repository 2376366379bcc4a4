"""The one place that turns selectors into ``(name, module)`` pairs, and lists what there is.

A selector is one of:

* a dotted name (``"layer1.0.conv2"``; ``""`` is the model itself),
* a glob (``"layer*.conv2"``, ``"features.*"``; ``*`` also crosses dots),
* a regular expression prefixed with ``re:`` (``"re:layer[12]\\.0\\.conv\\d"``),
* a module type (``torch.nn.Conv2d``, matched with ``isinstance``),
* a module object (``model.layer4``, matched by identity),
* a predicate ``(name, module) -> bool``,
* ``":blocks"``: the model's repeated blocks (``blocks``: ``layer1.0`` ... ``layer4.1`` on a
  ResNet, ``_blocks.0`` ... on an EfficientNet, ``encoder.layers.encoder_layer_0`` ... on a ViT),
  or every leaf when it has none,
* ``":experts"``: each mixture-of-experts layer whose experts are fused into 3-D parameters
  (transformers 5's Qwen3-MoE, Mixtral, gpt-oss) and the router beside it; a capture also gets one
  site per expert, ``<experts>.<e>``, with the tokens routed to it (``hookscope.core.experts``);
  ``"<name or glob>:experts"`` (``"model.layers.0:experts"``): those below the modules it names,
* a list or tuple of any of these (each entry must match at least one module).

``None`` selects every leaf module (a module with no children) here and in the functions the table
below says; where a function needs modules of one sort, None is that sort. Trivial modules (``trivial``:
``nn.Identity`` and padding, whose output is their input or a padded copy of it) are left out of
what a glob or a regular expression matches, unless they are all it matches; ``None``, a name, a
type, a module or a predicate selects them as asked. Matches come back in the order of
``model.named_modules()``, each module once.

A store holds site names, not modules: ``hookscope.core.store_sites`` picks its sites with the same selectors.

Each public function's default and what ``select=None`` picks there (``tests/test_vocabulary.py``
reads this table; docs/guide/vocabulary.md's table says the same):

| function | default | ``select=None`` picks |
|---|---|---|
| ``select_modules``, ``capture``, ``extract``, ``build_report``, ``compare.divergence`` | None | every leaf module |
| ``compare.cka`` | None | every leaf module of a model, every site of a store; ``select_b=None``: as ``select`` |
| ``patch_sweep``, ``build_text_report`` | ``":blocks"`` | every leaf module |
| ``logit_lens`` | ``":blocks"`` | the blocks, as ``":blocks"``: a lens reads what whole blocks return |
| ``cam`` ``explain_prediction`` | None | the one layer ``cam`` chooses (``explain.layers``: the last spatial map) |
| ``attention`` | None | every module that returns attention weights |
| ``attention_rollout`` | None | every ``nn.MultiheadAttention`` (refused on a model with linear-attention layers) |
| ``linear_attention`` | None | every linear-attention layer (GatedDeltaNet, Mamba, Mamba2) |
| ``capture_llm`` | None | the decoder layers (each child of the model's layer list): their residual streams |
| ``watch`` | None | every leaf with parameters and every activation module (``train.sites``) |
| ``nan_guard`` | None | every module, containers too: a NaN made by a container's own code is found there |
| ``probe``, ``StoreDataset``, ``StoreStream``, ``export`` | None | every site of the store (``select_sites``) |
| ``directions`` | None | every site of the store (``select_sites``), each read in chunks |

A compiled model (``torch.compile(model)``) is named as the eager model: names lose their
``_orig_mod.`` segments (a selector may still be written with them), and the modules returned
are the eager ones, where hooks fire (``hookscope.core.compiled``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Union

from torch import nn

from ..base.deprecation import renamed
from ..base.words import closest
from ..errors import SelectionError
from .blocks import blocks, unique
from .compiled import eager_selector, has_wrappers, named_modules, parallel_name, unwrap
from .experts import EXPERTS, expert_units

Selector = Union[str, nn.Module, type[nn.Module], Callable[[str, nn.Module], bool], Sequence["Selector"]]

_GLOB_CHARS = frozenset("*?[")
BLOCKS = ":blocks"
_PADDING = [
    f"{kind}Pad{d}d" for kind in ("Zero", "Constant", "Reflection", "Replication", "Circular") for d in (1, 2, 3)
]
TRIVIAL: tuple[type[nn.Module], ...] = (nn.Identity, *(getattr(nn, n) for n in _PADDING if hasattr(nn, n)))


@dataclass(frozen=True)
class ModuleInfo:
    """One module of a model, as ``hookscope.list_modules`` reports it.

    Attributes:
        name: the dotted path; ``""`` is the model itself.
        type: the module's class name.
        params: the parameters of this module and its children, counted in elements.
        depth: 0 for the model itself, 1 for its children, and so on.
        leaf: True when the module has no children.
    """

    name: str  # dotted path; "" is the model itself
    type: str  # class name
    params: int  # parameters, this module and its children
    depth: int  # 0 for the model itself
    leaf: bool  # True when the module has no children


def list_modules(model: nn.Module) -> list[ModuleInfo]:
    """Every module of ``model``: dotted name, type, parameter count, depth (a compiled model: its eager names).

    Args:
        model: the network to list.

    Returns:
        One ``ModuleInfo`` per module, the model itself first, in ``named_modules`` order.

    Raises:
        SelectionError: ``model`` is not an ``nn.Module``.
    """
    _check_model(model)
    return [
        ModuleInfo(
            name=name,
            type=type(module).__name__,
            params=sum(p.numel() for p in module.parameters()),
            depth=0 if not name else name.count(".") + 1,
            leaf=next(module.children(), None) is None,
        )
        for name, module in named_modules(model)
    ]


@renamed(selector="select")
def select_modules(model: nn.Module, select: Selector | None = None) -> list[tuple[str, nn.Module]]:
    """The ``(name, module)`` pairs of ``model`` that ``select`` matches, in model order (None, the
    default: every leaf module).

    A module registered under several names (a shared module) comes back once, under the first
    name that matched. Raises ``SelectionError`` naming the closest names when a selector
    matches nothing. ``selector=`` is the old spelling of ``select=``.

    Args:
        model: the network to select from.
        select: a name, a glob (``"layer*.conv2"``), ``":blocks"``, a module type, a predicate
            ``(name, module) -> bool``, or a list of these (their union); None picks every leaf module.

    Returns:
        ``(name, module)`` pairs in model order, each module once.

    Raises:
        SelectionError: ``model`` is not an ``nn.Module``, or a selector matches no module (the
            message names the closest names).
    """
    _check_model(model)
    named = named_modules(model, remove_duplicate=False)
    wrapped = has_wrappers(model)
    if select is None:
        leaves = [(n, m) for n, m in named if next(m.children(), None) is None]
        return unique(leaves) or named[:1]
    matched: set[str] = set()
    for single in entries(select):
        if single == BLOCKS:
            matched |= {name for name, _ in (blocks(model) or select_modules(model))}
            continue
        if isinstance(single, str) and single.endswith(EXPERTS):  # ":experts", or "<modules>:experts"
            matched |= set(_experts_of(model, named, single))
            continue
        single = parallel_name(model, single) if isinstance(single, str) else single  # "module.layer4" too
        match = _matcher(_eager(single) if wrapped else single)
        hits = [(name, module) for name, module in named if match(name, module)]
        if not hits:
            raise SelectionError(_no_match_message(single, model, named))
        matched |= {name for name, _ in (_untrivial(hits) if is_pattern(single) else hits)}
    return unique([(n, m) for n, m in named if n in matched])


def _experts_of(model: nn.Module, named: list[tuple[str, nn.Module]], selector: str) -> list[str]:
    """What ``":experts"`` picks (``core.experts.expert_units``), or ``"<name or glob>:experts"`` below the modules
    it names."""
    if selector != EXPERTS:
        test = name_matcher(selector.removesuffix(EXPERTS))
        chosen = [n for n, _ in named if test(n)]
        named = [(n, m) for n, m in named if any(n == c or n.startswith(f"{c}.") or not c for c in chosen)]
    found = expert_units(named)
    if not found:
        raise SelectionError(
            f"{selector!r} found no fused experts in {type(unwrap(model)).__name__}: no module there holds "
            "(experts, ...) parameters, one of them 3-D; select a mixture-of-experts layer's experts by name instead"
        )
    return found


def experts_selected(model: nn.Module | None, select: Selector | None) -> list[tuple[str, nn.Module]]:
    """The modules the ``":experts"`` entries of ``select`` pick (``"<modules>:experts"`` too): a capture keeps one
    site per expert of the fused experts modules among them (``core.experts.ExpertSites``)."""
    if model is None or select is None:
        return []
    asked = [s for s in entries(select) if isinstance(s, str) and s.endswith(EXPERTS)]
    return select_modules(model, asked) if asked else []


def modules_under(model: nn.Module, select: Selector) -> list[tuple[str, nn.Module]]:
    """The modules ``select`` matches and every module inside them, in model order, each once: where
    ``attention`` and ``attention_rollout`` look for attention (``":blocks"``: each block's)."""
    chosen = [name for name, _ in select_modules(model, select)]
    return [(n, m) for n, m in named_modules(model) if any(n == c or n.startswith(f"{c}.") or not c for c in chosen)]


def _untrivial(pairs: list[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """``pairs`` without the trivial modules (``TRIVIAL``), unless that leaves nothing."""
    kept = [(n, m) for n, m in pairs if not trivial(m)]
    return kept or pairs


def trivial(module: nn.Module) -> bool:
    """An identity or padding module: one of ``TRIVIAL``, or a model's own class named ``Identity``
    (EfficientNet's ``static_padding``) or ``...Pad1d/2d/3d``."""
    return isinstance(module, TRIVIAL) or trivial_class(type(module).__name__)


def trivial_class(name: str) -> bool:
    """A class name of an identity or padding module (``trivial``), as a store keeps it."""
    return name == "Identity" or name.endswith(("Pad1d", "Pad2d", "Pad3d"))


def is_pattern(selector: Selector) -> bool:
    """A glob or a ``re:`` expression: what leaves trivial modules out of its matches."""
    return isinstance(selector, str) and (selector.startswith("re:") or bool(_GLOB_CHARS & set(selector)))


def _eager(selector: Selector) -> Selector:
    """A selector of a compiled model, as the eager model's: ``_orig_mod`` out of names, wrappers unwrapped."""
    if isinstance(selector, str):
        return eager_selector(selector)
    return unwrap(selector) if isinstance(selector, nn.Module) else selector


def entries(selector: Selector) -> list[Selector]:
    """A selector as its single entries, lists flattened (an empty list refused)."""
    if isinstance(selector, (list, tuple)):
        if not selector:
            raise SelectionError("the selector list is empty; pass at least one name, glob, type or predicate")
        return [s for item in selector for s in entries(item)]
    return [selector]


Match = Callable[[str, nn.Module], bool]


def _matcher(selector: Selector) -> Match:
    """One selector as a ``(name, module) -> bool`` test, validated once, before any matching."""
    if isinstance(selector, str):
        test = name_matcher(selector)
        return lambda name, _: test(name)
    if isinstance(selector, nn.Module):
        return lambda _, module: module is selector
    if isinstance(selector, type) and issubclass(selector, nn.Module):
        return lambda _, module: isinstance(module, selector)
    if callable(selector) and not isinstance(selector, type):
        predicate = selector
        return lambda name, module: bool(predicate(name, module))
    raise SelectionError(
        f"{selector!r} is not a selector; pass a module name, a glob, 're:<regex>', a module, "
        "an nn.Module subclass, a (name, module) -> bool predicate, or a list of these"
    )


def name_matcher(selector: str) -> Callable[[str], bool]:
    """A name, a glob or ``re:`` as a test of a dotted name (a pattern never matches ``""``, the model)."""
    if selector.startswith("re:"):
        pattern = _regex(selector)
        return lambda name: name != "" and pattern.fullmatch(name) is not None
    if _GLOB_CHARS & set(selector):
        return lambda name: name != "" and fnmatch.fnmatchcase(name, selector)
    return lambda name: name == selector


def _regex(selector: str) -> re.Pattern[str]:
    try:
        return re.compile(selector[3:])
    except re.error as err:
        raise SelectionError(f"{selector!r} is not a valid regular expression: {err}") from err


def _no_match_message(selector: Selector, model: nn.Module, named: list[tuple[str, nn.Module]]) -> str:
    model_name = f"{type(unwrap(model)).__name__} ({len(named)} modules)"
    if isinstance(selector, str):
        names = [n for n, _ in named if n]
        hint = closest(eager_selector(selector).removeprefix("re:").replace("*", "").replace("?", ""), names)
        what = repr(selector)
    elif isinstance(selector, nn.Module):
        hint, what = "", f"module {type(selector).__name__} (not a submodule of this model)"
    elif isinstance(selector, type):
        types = sorted({type(m).__name__ for _, m in named})
        hint = f"; types present: {', '.join(types[:8])}{' and more' if len(types) > 8 else ''}"
        what = f"type {selector.__name__}"
    else:
        hint, what = "", f"predicate {getattr(selector, '__name__', repr(selector))}"
    return (
        f"{what} matched no module of {model_name}{hint}. "
        "Run `hookscope list MODEL` or hookscope.list_modules(model) to see the names."
    )


def _check_model(model: object) -> None:
    if not isinstance(model, nn.Module):
        raise SelectionError(f"expected a torch.nn.Module, got {type(model).__name__}")


def selector_text(select: Selector | None) -> list[str] | None:
    """Selectors as text (what a store's manifest records): names and globs as they are, types and functions
    by name."""
    if select is None:
        return None
    items = select if isinstance(select, (list, tuple)) else [select]
    return [one_selector_text(s) for s in items]


def one_selector_text(select: object) -> str:
    """One selector as text: a string as it is, a type, module or function by name."""
    if isinstance(select, str):
        return select
    if isinstance(select, type):
        return f"type:{select.__module__}.{select.__qualname__}"
    if isinstance(select, nn.Module):
        return f"module:{type(select).__name__}"
    return f"callable:{getattr(select, '__qualname__', type(select).__name__)}"
