"""Structured values (tuples, dicts, dataclasses, HF ``ModelOutput``) to flat, stable keys.

A module may return a tensor, a tuple of tensors, a dict, a dataclass or a HuggingFace
``ModelOutput``. hookscope flattens every such value into ``(key, tensor)`` pairs, in the
order the value is laid out, with keys that read like the Python expression reaching the
tensor::

    out                        a plain tensor
    out[0], out[1][2]          tuple or list items
    out['logits']              dict items
    out.last_hidden_state      dataclass, namedtuple or ModelOutput fields
    args[0], kwargs.mask       a call's positional and keyword arguments

Non-tensor leaves (ints, strings, None) are skipped. ``sort_key`` orders keys naturally
(``out[2]`` before ``out[10]``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from typing import Any, cast

from torch import Tensor

MAX_DEPTH = 32  # deeper nesting than this is a cycle or a mistake; we stop walking

Leaves = list[tuple[str, Tensor]]


def flatten(value: object, prefix: str = "out") -> Leaves:
    """Every tensor inside ``value`` with its key, in layout order."""
    leaves: Leaves = []
    _walk(value, prefix, leaves, 0)
    return leaves


def flatten_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Leaves:
    """Every tensor among a call's arguments: ``args[i]...`` then ``kwargs.name...``."""
    leaves: Leaves = []
    for i, arg in enumerate(args):
        _walk(arg, f"args[{i}]", leaves, 0)
    for name, arg in kwargs.items():
        _walk(arg, f"kwargs.{name}", leaves, 0)
    return leaves


def sort_key(key: str) -> tuple[tuple[int, int | str], ...]:
    """Natural ordering for keys: ``out[2]`` sorts before ``out[10]``."""
    parts = re.split(r"([0-9]+)", key)
    return tuple((0, int(p)) if p.isascii() and p.isdigit() else (1, p) for p in parts if p)


def _walk(value: object, key: str, leaves: Leaves, depth: int) -> None:
    if isinstance(value, Tensor):
        leaves.append((key, value))
        return
    if depth >= MAX_DEPTH:
        return
    for child_key, child in _children(value, key):
        _walk(child, child_key, leaves, depth + 1)


def _is_model_output(value: Any) -> bool:
    """A HuggingFace ``ModelOutput``: a dataclass that is also an OrderedDict of its set fields."""
    return isinstance(value, Mapping) and dataclasses.is_dataclass(value)


def _children(value: object, key: str) -> Iterator[tuple[str, object]]:
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return
    if _is_model_output(value):
        yield from ((f"{key}.{k}", v) for k, v in cast(Mapping[str, object], value).items())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        yield from ((f"{key}.{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value))
    elif isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        yield from ((f"{key}.{name}", v) for name, v in zip(value._fields, value, strict=True))
    elif isinstance(value, (list, tuple)):
        yield from ((f"{key}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, Mapping):
        yield from ((f"{key}[{k!r}]", v) for k, v in value.items())
