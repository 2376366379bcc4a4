"""The ``api`` tool: hookscope's public names for an assistant, from the package's own docstrings.

Without a name: every name in ``hookscope.__all__`` with what it is (function, class, error,
warning, value), the module it lives in and its docstring's first line, functions first (what a
user calls), then classes, then errors and warnings. With a name: its signature and whole docstring.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..base.words import closest
from ..errors import OptionError
from .budget import Section, table_sections


def api(name: str | None = None) -> list[Section]:
    """hookscope's public API: a map of every public name, or one name's signature and docstring.

    Args:
        name: a name in ``hookscope.__all__``; None maps them all.

    Returns:
        The sections of the answer.

    Raises:
        OptionError: ``name`` is not a public name of hookscope.
    """
    import hookscope

    names = [n for n in hookscope.__all__ if not n.startswith("_")]
    if name is not None:
        if name not in names:
            raise OptionError(f"{name!r} is not a public name of hookscope{closest(name, names)}")
        return [_one(name, getattr(hookscope, name))]
    groups: dict[str, list[list[str]]] = {
        "functions": [],
        "modules": [],
        "classes": [],
        "errors and warnings": [],
        "values": [],
    }
    for n in names:
        obj = getattr(hookscope, n)
        groups[_group(obj)].append([n, _home(obj), _first_line(obj)])
    values = {"functions": 70, "modules": 65, "classes": 60, "errors and warnings": 40, "values": 30}
    header = ["name", "module", "what it is"]
    return [
        section
        for group, rows in groups.items()
        if rows
        for section in table_sections(f"Public {group} ({len(rows)})", header, rows, value=values[group], first=60)
    ]


def _one(name: str, obj: Any) -> Section:
    try:
        signature = f"{name}{inspect.signature(obj)}" if callable(obj) else f"{name} = {obj!r}"
    except (TypeError, ValueError):  # a builtin or a class without a readable signature
        signature = name
    doc = inspect.getdoc(obj) or "(no docstring)"
    text = f"```python\n{signature}\n```\nfrom {_home(obj)}\n\n{doc}"
    return Section(name, text, {"signature": signature, "module": _home(obj), "doc": doc}, value=80)


def _group(obj: Any) -> str:
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return "errors and warnings"
    if inspect.isclass(obj):
        return "classes"
    if inspect.ismodule(obj):
        return "modules"
    return "functions" if callable(obj) else "values"


def _home(obj: Any) -> str:
    if inspect.ismodule(obj):
        return obj.__name__
    return str(getattr(obj, "__module__", None) or type(obj).__module__)


def _first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) if callable(obj) or inspect.ismodule(obj) else None
    return (doc or "").strip().split("\n", 1)[0]
