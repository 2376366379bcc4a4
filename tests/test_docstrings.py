"""Every public function and class documents itself in Google style (Sphinx napoleon builds the API pages).

Public: the names of ``hookscope.__all__``, of ``hookscope.edits``, ``.compare``, ``.reducers``, ``.zoo``,
``.progress`` and of the framework callbacks in ``hookscope.integrations``. For each:

* a function's ``Args:`` names exactly its parameters (``*args`` and ``**kwargs`` as such), both ways;
  ``Returns:`` (or ``Yields:``) unless it returns None; ``Raises:`` names every hookscope error class
  its own body raises, and only classes that exist;
* a class with a constructor of its own lists the constructor's parameters under ``Args:`` in the
  class docstring (a dataclass may list its fields under ``Attributes:`` instead); each public
  method has ``Args:`` (when it takes arguments), ``Returns:`` and ``Raises:`` the same way.
  Methods a framework calls (an override of a base class outside hookscope) are documented by the
  framework.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import inspect
import re
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import hookscope
import hookscope.errors
import hookscope.integrations.accelerate
import hookscope.integrations.lightning
import hookscope.integrations.trainer
import hookscope.progress
import hookscope.reducers

SECTION = re.compile(r"^(Args|Returns|Yields|Raises|Attributes|Examples?|Notes?|Warns|See Also):\s*$")
ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:")
ERRORS = {name for name, obj in vars(hookscope.errors).items() if isinstance(obj, type)}


def sections(doc: str) -> dict[str, list[str]]:
    """The docstring's Google sections: each header's indented body, dedented, by header."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in inspect.cleandoc(doc).splitlines():
        header = SECTION.match(line)
        if header:
            current = found.setdefault(header.group(1), [])
        elif current is not None and (line.startswith(" ") or not line.strip()):
            current.append(line)
        else:
            current = None
    return {name: textwrap.dedent("\n".join(body)).splitlines() for name, body in found.items()}


def entries(body: list[str]) -> list[str]:
    """The names a section lists: its lines at the section's own indent, ``name (type): text``."""
    return [m.group(1) for line in body if line and not line[0].isspace() and (m := ENTRY.match(line))]


def parameters(fn: Callable[..., Any], *, bound: bool) -> list[str]:
    """The signature's parameter names, ``*args``/``**kwargs`` spelled as such, ``self``/``cls`` dropped."""
    names = []
    for i, p in enumerate(inspect.signature(fn, follow_wrapped=True).parameters.values()):
        if bound and i == 0 and p.name in ("self", "cls"):
            continue
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        names.append(prefix + p.name)
    return names


def returns_none(fn: Callable[..., Any]) -> bool:
    return inspect.signature(fn, follow_wrapped=True).return_annotation in (None, "None")


def raised(fn: Callable[..., Any]) -> set[str]:
    """The hookscope error classes the function's own body raises (``raise XError(...)``)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(fn))))
    except (OSError, TypeError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = exc.attr if isinstance(exc, ast.Attribute) else getattr(exc, "id", "")
            if name in ERRORS and name not in ("HookscopeError", "HookscopeWarning"):
                names.add(name)
    return names


def problems(fn: Callable[..., Any], *, bound: bool, doc: str | None = None, fields: bool = False) -> list[str]:
    """What the docstring of a function (or a method, ``bound``) lacks; empty when it is complete."""
    constructor, doc = doc is not None, doc if doc is not None else inspect.getdoc(fn)
    if not doc:
        return ["no docstring"]
    found = sections(doc)
    wrong = []
    params = parameters(fn, bound=bound)
    listed = entries(found.get("Args", [])) or (entries(found.get("Attributes", [])) if fields else [])
    if params and listed != params:
        missing, extra = [p for p in params if p not in listed], [a for a in listed if a not in params]
        wrong.append(f"Args: {listed} != signature {params} (missing {missing}, not parameters {extra})")
    if not params and "Args" in found:
        wrong.append("Args: listed, but it takes no arguments")
    if not constructor and not returns_none(fn) and not ({"Returns", "Yields"} & found.keys()):
        wrong.append("no Returns: (or Yields:) section")
    listed_errors = set(entries(found.get("Raises", [])))
    if missing_errors := raised(fn) - listed_errors:
        wrong.append(f"Raises: lacks {sorted(missing_errors)}")
    if unknown := {e for e in listed_errors if e not in ERRORS and not hasattr(builtins, e)}:
        wrong.append(f"Raises: names {sorted(unknown)}, which are not error classes")
    if bare := [line.rstrip() for body in found.values() for line in body if ENTRY.fullmatch(line.rstrip())]:
        wrong.append(f"entries without a description: {bare}")
    return wrong


def own_constructor(cls: type) -> Callable[..., Any] | None:
    """The constructor a class defines (or a dataclass generates) in hookscope, if any."""
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            init = vars(klass)["__init__"]
            module = getattr(klass, "__module__", "")
            return init if module.startswith("hookscope") else None
    return None


def methods(cls: type) -> Iterator[tuple[str, Callable[..., Any], bool]]:
    """The public methods of a class that hookscope defines (not a framework's hooks); properties are left out."""
    foreign = {name for klass in cls.__mro__ if not klass.__module__.startswith("hookscope") for name in vars(klass)}
    for name in sorted(dir(cls)):
        if name.startswith("_") or name in foreign:
            continue
        attr = inspect.getattr_static(cls, name)
        fn = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
        if inspect.isfunction(fn):
            yield name, fn, not isinstance(attr, staticmethod)


def public(module: Any, prefix: str) -> dict[str, Any]:
    """A module's public functions and classes: its ``__all__``, else what it defines without a leading ``_``."""
    defined = {n: obj for n, obj in vars(module).items() if getattr(obj, "__module__", "") == module.__name__}
    names = getattr(module, "__all__", None) or [n for n in defined if not n.startswith("_")]
    found = {f"{prefix}{n}": getattr(module, n) for n in names}
    return {n: obj for n, obj in found.items() if inspect.isfunction(obj) or inspect.isclass(obj)}


PUBLIC: dict[str, Any] = public(hookscope, "")
for _module, _prefix in [
    (hookscope.edits, "edits."),
    (hookscope.compare, "compare."),
    (hookscope.reducers, "reducers."),
    (hookscope.zoo, "zoo."),
    (hookscope.progress, "progress."),
    (hookscope.integrations.trainer, "integrations.trainer."),
    (hookscope.integrations.lightning, "integrations.lightning."),
    (hookscope.integrations.accelerate, "integrations.accelerate."),
]:
    PUBLIC |= public(_module, _prefix)


def no_constructor() -> None:
    """Stands for a class with no constructor of its own to document (an error class, a protocol)."""


CALLABLES: dict[str, tuple[Callable[..., Any], bool, str | None]] = {}
DATACLASSES = {name for name, obj in PUBLIC.items() if dataclasses.is_dataclass(obj)}
for _name, _obj in PUBLIC.items():
    if inspect.isfunction(_obj):
        CALLABLES[_name] = (_obj, False, None)
        continue
    _init = own_constructor(_obj)
    if issubclass(_obj, BaseException) or _init is None:
        CALLABLES[_name] = (no_constructor, False, inspect.getdoc(_obj) or "")
    else:
        CALLABLES[_name] = (_init, True, inspect.getdoc(_obj) or "")
    for _method, _fn, _bound in methods(_obj):
        CALLABLES[f"{_name}.{_method}"] = (_fn, _bound, None)


def test_the_public_surface_is_found() -> None:
    """The walk reaches every room's names: a broken walk must not pass by checking nothing."""
    assert {"capture", "Capture", "edits.zero", "compare.cka", "reducers.top_examples"} <= set(CALLABLES)
    assert "progress.callback" in CALLABLES
    assert "zoo.efficientnet_lite0" in CALLABLES and "integrations.accelerate.watch_accelerate" in CALLABLES
    assert len(CALLABLES) > 150


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_docstring_has_google_sections(name: str) -> None:
    """The sections napoleon reads are there and name what the signature takes."""
    fn, bound, doc = CALLABLES[name]
    wrong = problems(fn, bound=bound, doc=doc, fields=name in DATACLASSES)
    assert not wrong, f"{name}: " + "; ".join(wrong)


def test_the_parser_reads_google_sections() -> None:
    """The parser on a hand-written docstring: what it must accept, and what it must refuse."""

    def f(a: int, *rest: int, b: str = "", **options: Any) -> int:
        """Summary.

        Args:
            a: the first
                continued.
            *rest: more.
            b (str): a name.
            **options: the rest.

        Returns:
            A number.

        Raises:
            OptionError: when ``b`` is unknown.
        """
        raise hookscope.OptionError(b)

    assert problems(f, bound=False) == []
    assert problems(f, bound=False, doc=(f.__doc__ or "").replace("a name.", "")) == [
        "entries without a description: ['b (str):']"
    ]
    assert entries(sections(f.__doc__ or "")["Args"]) == ["a", "*rest", "b", "**options"]

    def g(a: int, c: int) -> None:
        """Summary.

        Args:
            a: the first.
            b: not a parameter.
        """
        raise hookscope.errors.ShapeError(a)

    assert problems(g, bound=False) == [
        "Args: ['a', 'b'] != signature ['a', 'c'] (missing ['c'], not parameters ['b'])",
        "Raises: lacks ['ShapeError']",
    ]
