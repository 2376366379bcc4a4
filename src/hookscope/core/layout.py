"""Layouts (``hookscope.core.tree``) as JSON, so a store rebuilds what a live capture does.

A layout becomes a small JSON value: ``{"t": key}`` for a tensor, ``{"v": value}`` (or a typed
form: ``dtype``, ``device``, ``size``, ``complex``, ``bytes``, ``ellipsis``) for a plain value,
``{"not_kept": type}`` for an object that was not kept, and ``{"n": form, "c": "module:qualname",
"k": names, "i": children}`` for a container. ``layout_id`` names a layout by its content, so a
store lists each distinct layout once however many calls share it.

Reading one back imports nothing: a container's class is used when its module is already
imported (``sys.modules``) and the class is of the form written (a namedtuple, a dataclass, a
``ModelOutput``, a dict); otherwise ``tree.rebuild`` makes the plain equivalent. Opening a store
still runs no code of its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
from typing import Any

import torch

from .tree import FORMS, Layout, Leaf, Node, NotKept, Plain

Json = Any


def to_json(layout: Layout) -> Json:
    """``layout`` as a JSON value (see the module doc)."""
    if isinstance(layout, Leaf):
        return {"t": layout.key}
    if isinstance(layout, Plain):
        return _plain(layout.value)
    if isinstance(layout, NotKept):
        return {"not_kept": layout.type, "why": layout.why}
    cls = f"{layout.cls.__module__}:{layout.cls.__qualname__}" if isinstance(layout.cls, type) else layout.cls
    names, children = [_plain(n) for n in layout.names], [to_json(c) for c in layout.children]
    return {"n": layout.form, "c": cls, "k": names, "i": children}


def from_json(data: Json) -> Layout:
    """The layout ``to_json`` wrote (containers' classes found as the module doc says)."""
    if "t" in data:
        return Leaf(str(data["t"]))
    if "not_kept" in data:
        return NotKept(str(data["not_kept"]), str(data.get("why", NotKept.why)))
    if "n" in data:
        form = str(data["n"])
        if form not in FORMS:
            return NotKept(form, "a container this hookscope does not know")
        names = tuple(_hashable(_value(n)) for n in data.get("k", []))
        children = tuple(from_json(c) for c in data.get("i", []))
        return Node(form, _resolve(data.get("c"), form), names, children)
    return Plain(_value(data))


def layout_id(data: Json) -> str:
    """A short name for a layout's JSON, the same for equal layouts."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _plain(value: object) -> Json:
    if value is None or isinstance(value, (bool, int, str)):
        return {"v": value}
    if isinstance(value, float):
        return {"v": value} if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.Size):
        return {"size": list(value)}
    if isinstance(value, complex):
        return {"complex": [value.real, value.imag]}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if value is Ellipsis:
        return {"ellipsis": True}
    if isinstance(value, tuple):  # a dict key
        return {"tuple": [_plain(v) for v in value]}
    return {"repr": repr(value)}


def _value(data: Json) -> Any:
    if "v" in data:
        return data["v"]
    if "float" in data:
        return float(data["float"])
    if "dtype" in data:
        dtype = getattr(torch, str(data["dtype"]), None)
        return dtype if isinstance(dtype, torch.dtype) else str(data["dtype"])
    if "device" in data:
        return torch.device(data["device"])
    if "size" in data:
        return torch.Size(data["size"])
    if "complex" in data:
        return complex(*data["complex"])
    if "bytes" in data:
        return bytes.fromhex(data["bytes"])
    if "ellipsis" in data:
        return Ellipsis
    if "tuple" in data:
        return tuple(_value(v) for v in data["tuple"])
    return data.get("repr")


def _hashable(value: Any) -> Any:
    return value if not isinstance(value, list) else tuple(value)


def _resolve(path: object, form: str) -> type | str | None:
    """The class at ``module:qualname`` when its module is imported and it fits ``form``; else the text."""
    if not isinstance(path, str) or ":" not in path:
        return None
    module_name, qualname = path.split(":", 1)
    found: object = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found if isinstance(found, type) and _fits(found, form) else path


def _fits(cls: type, form: str) -> bool:
    if form == "namedtuple":
        return issubclass(cls, tuple) and hasattr(cls, "_fields")
    if form in ("dataclass", "model_output"):
        return dataclasses.is_dataclass(cls)
    return issubclass(cls, {"tuple": tuple, "list": list, "dict": dict}.get(form, type(None)))
