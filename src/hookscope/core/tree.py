"""Structured values (tuples, dicts, dataclasses, HF ``ModelOutput``): flat keys, and back again.

A module may return a tensor, a tuple of tensors, a dict, a dataclass or a HuggingFace
``ModelOutput``. hookscope flattens every such value into ``(key, tensor)`` pairs, in the
order the value is laid out, with keys that read like the Python expression reaching the
tensor::

    out                        a plain tensor
    out[0], out[1][2]          tuple or list items
    out['logits']              dict items
    out.last_hidden_state      dataclass, namedtuple or ModelOutput fields
    args[0], kwargs.mask       a call's positional and keyword arguments

Beside the leaves, ``flatten_layout`` returns the value's *layout*: its containers with each
tensor replaced by its key (a ``Leaf``). ``rebuild(layout, tensors)`` puts kept tensors back
where they were, so a shortcut returns what the module returned. Non-tensor leaves that are
plain values (None, numbers, strings, dtypes, devices, sizes) are kept as they were; any other
object is not kept (it may hold tensors or state hookscope did not copy) and comes back as a
``NotKept`` marker that names its type. ``hookscope.core.layout`` writes layouts as JSON for stores.
"""

from __future__ import annotations

import dataclasses
import re
from collections import namedtuple
from collections.abc import Mapping
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor

MAX_DEPTH = 32  # deeper nesting than this is a cycle or a mistake; we stop walking

Leaves = list[tuple[str, Tensor]]
PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size, type(Ellipsis))
FORMS = ("tuple", "list", "dict", "namedtuple", "dataclass", "model_output", "arguments")


@dataclasses.dataclass(frozen=True)
class Leaf:
    """Where a tensor sat: its key."""

    key: str


@dataclasses.dataclass(frozen=True)
class Plain:
    """A non-tensor leaf kept as the module returned it (None, a number, a string...)."""

    value: object


@dataclasses.dataclass(frozen=True)
class NotKept:
    """An object that was not kept (not a tensor, not a plain value); stands in its place."""

    type: str
    why: str = "hookscope keeps tensors and plain values only"

    def __repr__(self) -> str:
        return f"<not kept: {self.type} ({self.why})>"


@dataclasses.dataclass(frozen=True)
class Node:
    """A container: its form (``FORMS``), its class (or ``module:qualname`` read from a store),
    the names of its items (dict keys, fields; empty for sequences) and its children's layouts."""

    form: str
    cls: type | str | None
    names: tuple[Any, ...]
    children: tuple[Layout, ...]


Layout = Leaf | Plain | NotKept | Node


class Arguments(NamedTuple):
    """A call's inputs, as the forward pre-hook saw them: ``args, kwargs = cap[site].input``."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def flatten(value: object, prefix: str = "out") -> Leaves:
    """Every tensor inside ``value`` with its key, in layout order."""
    return flatten_layout(value, prefix)[0]


def flatten_layout(value: object, prefix: str = "out") -> tuple[Leaves, Layout]:
    """Every tensor inside ``value`` with its key, and the layout that ``rebuild`` reverses."""
    leaves: Leaves = []
    return leaves, _walk(value, prefix, leaves, 0)


def flatten_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Leaves:
    """Every tensor among a call's arguments: ``args[i]...`` then ``kwargs.name...``."""
    return flatten_call_layout(args, kwargs)[0]


def flatten_call_layout(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Leaves, Layout]:
    """A call's tensors (as ``flatten_call``) and its layout, which rebuilds to ``Arguments``."""
    leaves: Leaves = []
    positional = tuple(_walk(arg, f"args[{i}]", leaves, 0) for i, arg in enumerate(args))
    named = tuple(_walk(arg, f"kwargs.{name}", leaves, 0) for name, arg in kwargs.items())
    parts = (Node("tuple", tuple, (), positional), Node("dict", dict, tuple(kwargs), named))
    return leaves, Node("arguments", None, (), parts)


def rebuild(layout: Layout, tensors: Mapping[str, Tensor]) -> Any:
    """The value ``layout`` describes, with ``tensors[key]`` at each leaf (None where a key is absent).

    Containers keep their type where it can be rebuilt; where not (a class that cannot be found or
    constructed again), a namedtuple stays a namedtuple of the same name and fields, and a dataclass
    or ``ModelOutput`` becomes a plain dataclass of the same name and fields.
    """
    if isinstance(layout, Leaf):
        return tensors.get(layout.key)
    if isinstance(layout, Plain):
        return layout.value
    if isinstance(layout, NotKept):
        return layout
    items = [rebuild(child, tensors) for child in layout.children]
    return _assemble(layout, items)


def _walk(value: object, key: str, leaves: Leaves, depth: int) -> Layout:
    if isinstance(value, Tensor):
        leaves.append((key, value))
        return Leaf(key)
    if isinstance(value, PLAIN):
        return Plain(value)
    if depth >= MAX_DEPTH:
        return NotKept(type(value).__qualname__, f"nested deeper than {MAX_DEPTH} levels")
    shape = _shape(value)
    if shape is None:
        return NotKept(type(value).__qualname__)
    form, names, items = shape
    pairs = zip(names, items, strict=True)
    children = tuple(_walk(child, _child_key(key, form, name), leaves, depth + 1) for name, child in pairs)
    return Node(form, type(value), () if form in ("tuple", "list") else tuple(names), children)


def _child_key(key: str, form: str, name: Any) -> str:
    if form in ("tuple", "list"):
        return f"{key}[{name}]"
    if form == "dict":
        return f"{key}[{name!r}]"
    return f"{key}.{name}"


def _is_model_output(value: Any) -> bool:
    """A HuggingFace ``ModelOutput``: a dataclass that is also an OrderedDict of its set fields."""
    return isinstance(value, Mapping) and dataclasses.is_dataclass(value)


def _shape(value: object) -> tuple[str, list[Any], list[Any]] | None:
    """(form, item names, items) of a container hookscope walks into; None for anything else."""
    if _is_model_output(value):
        fields = cast(Mapping[str, object], value)
        return "model_output", list(fields), list(fields.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value)]
        return "dataclass", names, [getattr(value, n) for n in names]
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return "namedtuple", list(value._fields), list(value)
    if isinstance(value, (list, tuple)):
        return ("list" if isinstance(value, list) else "tuple"), list(range(len(value))), list(value)
    if isinstance(value, Mapping):
        return "dict", list(value), list(value.values())
    return None


def _assemble(node: Node, items: list[Any]) -> Any:
    cls = node.cls if isinstance(node.cls, type) else None
    if node.form == "arguments":
        args, kwargs = items
        return Arguments(args, kwargs)
    if node.form == "list":
        return items
    if node.form == "tuple":
        return _construct(cls, lambda c: c(items), tuple, tuple(items))
    fields = dict(zip(node.names, items, strict=True))
    if node.form == "dict":
        return _construct(cls, lambda c: c(fields), dict, fields)
    if node.form == "namedtuple":
        return _construct(cls, lambda c: c(*items), tuple, None) or _plain_namedtuple(node)(*items)
    built = _construct(cls, lambda c: _dataclass(c, fields), object, None)
    return built if built is not None else _plain_dataclass(node)(**fields)


def _construct(cls: type | None, make: Any, base: type, fallback: Any) -> Any:
    """``make(cls)`` when ``cls`` is a ``base`` that builds; ``fallback`` when it is absent or fails."""
    if cls is None or not issubclass(cls, base):
        return fallback
    try:
        built = make(cls)
    except Exception:  # a class whose constructor wants more than its fields: the plain equivalent
        return fallback
    return fallback if built is None else built


def _dataclass(cls: type, fields: dict[str, Any]) -> Any:
    if not dataclasses.is_dataclass(cls):
        return None
    init = {f.name for f in dataclasses.fields(cls) if f.init}
    built = cls(**{k: v for k, v in fields.items() if k in init})
    for name, value in fields.items():
        if name not in init:
            object.__setattr__(built, name, value)
    return built


_PLAIN_TYPES: dict[tuple[str, str, tuple[Any, ...]], type] = {}


def _type_name(node: Node) -> str:
    name = node.cls.__name__ if isinstance(node.cls, type) else str(node.cls or "value").rsplit(".", 1)[-1]
    return re.sub(r"\W", "_", name.rsplit(":", 1)[-1]) or "value"


def _plain_namedtuple(node: Node) -> type:
    key = ("namedtuple", _type_name(node), node.names)
    if key not in _PLAIN_TYPES:
        _PLAIN_TYPES[key] = namedtuple(_type_name(node), [str(n) for n in node.names], rename=True)
    return _PLAIN_TYPES[key]


def _plain_dataclass(node: Node) -> type:
    key = ("dataclass", _type_name(node), node.names)
    if key not in _PLAIN_TYPES:
        _PLAIN_TYPES[key] = dataclasses.make_dataclass(_type_name(node), [str(n) for n in node.names])
    return _PLAIN_TYPES[key]
