"""The pieces a store's files are checked with: one field at a time, each failure naming the field.

``hookscope.store.schema`` (the manifest) and ``hookscope.store.header`` (a shard's header) are
written with these: ``whole(value, "batches[3].index")`` returns the value when it is an integer in
range, else raises ``Wrong`` saying which field must be what and what it was. ``Wrong`` is a
``StoreError``; the two checkers turn it into one that names the file (or the shard) as well.
Also here: the layouts' JSON (``check_layout``), a tensor's bytes against its dtype and shape
(``fits``), names inside the store (``relative``) and JSON that nests too deep (``loads``, ``shallow``).
"""

from __future__ import annotations

import json
import keyword
import math
import re
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

import torch

from ..errors import StoreError

MAX_DEPTH = 64  # nesting of a free-form part (provenance, config, a site): deeper is damage, not data

MAX_LAYOUT_DEPTH = 48  # containers inside containers in a layout (a capture stops at 32)

MAX_DIMS = 64  # dimensions of a stored tensor

ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
            "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "uint16": 2, "uint32": 4,
            "uint64": 8}  # fmt: skip


class Wrong(StoreError):
    """A field that is not what the format says; the message names it and what it must be. The checkers
    of ``schema`` and ``header`` raise it again naming the file; it is a ``StoreError`` all the same."""


def check_batch(batch: object, where: str) -> dict[str, Any]:
    batch = an_object(batch, where)
    whole(batch.get("index"), f"{where}.index")
    need(batch.get("rows") is None or (is_int(batch["rows"]) and batch["rows"] >= 0), f"{where}.rows",
          "an integer >= 0 or null", batch.get("rows"))  # fmt: skip
    if "rank" in batch:
        whole(batch["rank"], f"{where}.rank")
    if "request" in batch:  # a vLLM request (hookscope.serving.sink): what it is, each field checked
        text(batch["request"], f"{where}.request")
        for name in ("prompt", "tokens"):
            whole(batch.get(name), f"{where}.{name}")
        counts = an_object(batch.get("calls"), f"{where}.calls")
        need(all(is_int(n) and n >= 0 for n in counts.values()), f"{where}.calls", "site -> an integer >= 0", counts)
        if "call_rows" in batch:  # its calls stored joined (hookscope.store.joined): the rows of each
            rows, calls = batch["call_rows"], max(counts.values(), default=0)
            need(type(rows) is list and len(rows) == calls and all(is_int(n) and n >= 0 for n in rows)
                 and sum(rows) == batch["tokens"], f"{where}.call_rows",
                 f"a list of {calls} integers >= 0 (one per call) adding up to tokens", rows)  # fmt: skip
        digest = batch.get("prompt_sha256")  # absent where the engine fed no token ids
        need(digest is None or re.fullmatch(r"[0-9a-f]{64}", str(digest)) is not None, f"{where}.prompt_sha256",
             "64 hexadecimal digits", digest)  # fmt: skip
    return batch


def check_layout(data: object, where: str, depth: int = 0) -> None:
    """A layout's JSON (``hookscope.core.layout``): known forms only, nested at most ``MAX_LAYOUT_DEPTH``."""
    need(depth <= MAX_LAYOUT_DEPTH, where, f"nested at most {MAX_LAYOUT_DEPTH} deep", "deeper")
    data = an_object(data, where)
    if "n" in data:
        _check_node(data, where, depth)
    elif "t" in data or "not_kept" in data:
        for name in ("t", "not_kept", "why"):
            need(data.get(name) is None or isinstance(data[name], str), f"{where}.{name}", "text", data.get(name))
    else:
        _check_value(data, where, depth)


def _check_node(data: dict[str, Any], where: str, depth: int) -> None:
    """A container: its form, class, names and children, as ``hookscope.core.tree.rebuild`` needs them."""
    form = text(data["n"], f"{where}.n")
    cls = data.get("c")
    need(cls is None or (isinstance(cls, str) and not _type_name(cls)[:1].isdigit()), f"{where}.c",
         "a class as module:qualname", cls)  # fmt: skip
    names = a_list(data.get("k", []), f"{where}.k")
    children = a_list(data.get("i", []), f"{where}.i")
    for i, name in enumerate(names):
        _check_value(name, f"{where}.k[{i}]", depth + 1)
    for i, child in enumerate(children):
        check_layout(child, f"{where}.i[{i}]", depth + 1)
    if form == "arguments":
        need(len(children) == 2, f"{where}.i", "two children (args, kwargs)", len(children))
    if form in ("dict", "namedtuple", "dataclass", "model_output"):
        need(len(names) == len(children), f"{where}.k", f"one name per child ({len(children)})", len(names))
    if form in ("dataclass", "model_output"):
        fields = [n.get("v") for n in names]
        need(all(isinstance(f, str) and f.isidentifier() and not keyword.iskeyword(f) for f in fields)
             and len(set(fields)) == len(fields), f"{where}.k", "distinct field names", fields)  # fmt: skip


def _type_name(cls: str) -> str:
    """The name ``hookscope.core.tree`` gives a class it cannot find (it must not start with a digit)."""
    return re.sub(r"\W", "_", cls.rsplit(".", 1)[-1].rsplit(":", 1)[-1])


def _check_value(data: object, where: str, depth: int) -> None:
    """A plain value's JSON: ``{"v": ...}`` or one of its typed forms, each with the type it needs."""
    need(depth <= MAX_LAYOUT_DEPTH, where, f"nested at most {MAX_LAYOUT_DEPTH} deep", "deeper")
    data = an_object(data, where)
    need(len(data) == 1, where, "an object of one field", sorted(data))
    ((form, value),) = data.items()
    checks: dict[str, Callable[[object], bool]] = {
        "v": lambda v: v is None or isinstance(v, (bool, int, str)) or (isinstance(v, float) and math.isfinite(v)),
        "float": lambda v: is_number(v),
        "dtype": lambda v: isinstance(v, str),
        "device": lambda v: isinstance(v, str) and _is_device(v),
        "size": lambda v: isinstance(v, list) and all(is_int(n) and n >= 0 for n in v),
        "complex": lambda v: isinstance(v, list) and len(v) == 2 and all(type(n) in (int, float) for n in v),
        "bytes": lambda v: isinstance(v, str) and _is_hex(v),
        "ellipsis": lambda v: v is True,
        "tuple": lambda v: isinstance(v, list),
        "repr": lambda v: isinstance(v, str),
    }
    need(form in checks and checks[form](value), f"{where}.{form}", "a value of its form", value)
    if form == "tuple":
        for i, item in enumerate(value):
            _check_value(item, f"{where}.tuple[{i}]", depth + 1)


def relative(name: object, where: str) -> str:
    """A file name inside the store: relative, POSIX, no ``..``."""
    need(isinstance(name, str) and name != "", where, "a file name inside the store", name)
    path = PurePosixPath(str(name))
    need(not path.is_absolute() and ".." not in path.parts and "\\" not in str(name) and "\x00" not in str(name),
          where, "a name inside the store (relative, no '..'), not one outside the store", name)  # fmt: skip
    return str(name)


def loads(text: str | bytes, where: str) -> Any:
    """JSON, with a damaged text (not JSON, nested past Python's recursion limit) as a ``Wrong``."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise Wrong(f"{where} is not JSON ({' '.join(str(err).split())[:80]})") from None


def fits(dtype: object, shape: object, offsets: object, data: int, where: str) -> None:
    """``shape`` of ``dtype`` is exactly the bytes ``offsets`` give, and they lie in the ``data`` bytes."""
    need(isinstance(dtype, str) and dtype in ITEMSIZE, f"{where}(dtype)", "a dtype hookscope reads", dtype)
    dims = wholes(shape, f"{where}(shape)")
    need(len(dims) <= MAX_DIMS, f"{where}(shape)", f"at most {MAX_DIMS} dimensions", len(dims))
    span = wholes(offsets, f"{where}(offsets)")
    need(len(span) == 2 and span[0] <= span[1] <= data, f"{where}(offsets)",
          f"[begin, end] with begin <= end <= {data} (the shard's data bytes)", offsets)  # fmt: skip
    needed = math.prod(dims) * ITEMSIZE[str(dtype)]
    need(span[1] - span[0] == needed, f"{where}(offsets)", f"{needed} bytes apart for shape {dims} {dtype}", span)


def each(items: object, where: str, check: Callable[[Any, str], Any]) -> list[Any]:
    return [check(item, f"{where}[{i}]") for i, item in enumerate(a_list(items, where))]


def shallow(value: object, where: str) -> None:
    """Refuse nesting past ``MAX_DEPTH`` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        need(depth <= MAX_DEPTH, where, f"nested at most {MAX_DEPTH} deep", "deeper")
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children)


def need(ok: bool, field: str, expected: str, got: object) -> None:
    if not ok:
        raise Wrong(f"{field} must be {expected}, got {show(got)}".strip())


def show(value: object) -> str:
    text = "nothing" if value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_int(value: object) -> bool:
    return type(value) is int  # not a bool (nor an int subclass, which JSON never gives)


def is_number(value: object) -> bool:
    if isinstance(value, str):
        return value in ("nan", "inf", "-inf")
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_hex(text: str) -> bool:
    return len(text) % 2 == 0 and all(c in "0123456789abcdefABCDEF" for c in text)


def _is_device(text: str) -> bool:
    try:
        torch.device(text)
    except (RuntimeError, ValueError):
        return False
    return True


def whole(value: object, where: str, low: int = 0, high: int | None = None) -> int:
    bound = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
    need(is_int(value) and low <= value and (high is None or value <= high), where, bound, value)  # type: ignore[operator]
    return value  # type: ignore[return-value]


def wholes(value: object, where: str) -> list[int]:
    need(type(value) is list and all(type(v) is int and v >= 0 for v in value), where,
          "a list of integers >= 0", value)  # fmt: skip
    return value  # type: ignore[return-value]


def text(value: object, where: str) -> str:
    need(isinstance(value, str), where, "text", value)
    return value  # type: ignore[return-value]


def texts(value: object, where: str) -> list[str]:
    need(isinstance(value, list) and all(isinstance(v, str) for v in value), where, "a list of text", value)
    return value  # type: ignore[return-value]


def text_map(value: object, where: str) -> dict[str, str]:
    need(isinstance(value, dict) and all(isinstance(v, str) for v in value.values()), where,
          "an object of text values", value)  # fmt: skip
    return value  # type: ignore[return-value]


def a_list(value: object, where: str) -> list[Any]:
    need(isinstance(value, list), where, "a list", value)
    return value  # type: ignore[return-value]


def an_object(value: object, where: str) -> dict[str, Any]:
    need(isinstance(value, dict), where, "an object", value)
    return value  # type: ignore[return-value]
