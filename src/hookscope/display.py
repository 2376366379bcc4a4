"""Inline views: every result shows itself in a notebook, drawn by the room that knows how.

The result classes live low in the house (``core``, ``stats``, ``store``) and their pictures are
drawn high (``report``, ``viz``), so a class cannot import its own drawing. A class mixes in
:class:`Shows`; the module that draws it registers a function with :func:`shows_as`. Jupyter, VS
Code and GitHub call ``_repr_html_``; with nothing registered it returns None and they fall back to
the one-line ``__repr__``. Importing :mod:`hookscope` imports the drawing modules, so a result
shows itself wherever it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
Renderer = Callable[[Any], str]

_HTML: dict[type, Renderer] = {}
_PNG: dict[type, Callable[[Any], bytes | None]] = {}


def shows_as(cls: type, *, png: Callable[[Any], bytes | None] | None = None) -> Callable[[Renderer], Renderer]:
    """Register the decorated function as the HTML view of ``cls`` (and ``png`` as its picture)."""

    def register(html: Renderer) -> Renderer:
        _HTML[cls] = html
        if png is not None:
            _PNG[cls] = png
        return html

    return register


def _lookup(table: dict[type, Any], obj: object) -> Any:
    return next((table[k] for k in type(obj).__mro__ if k in table), None)


def has_view(cls: type) -> bool:
    """Whether a room registered an HTML view for ``cls`` (or a class it derives from)."""
    return any(k in _HTML for k in cls.__mro__)


def html_of(obj: object) -> str | None:
    """The registered HTML view of ``obj``, or None when no room draws its class."""
    render = _lookup(_HTML, obj)
    return None if render is None else render(obj)


class Shows:
    """Mix-in: ``_repr_html_`` (and ``_repr_png_`` where a picture is registered) for notebooks."""

    def _repr_html_(self) -> str | None:
        return html_of(self)

    def _repr_png_(self) -> bytes | None:
        draw = _lookup(_PNG, self)
        return None if draw is None else draw(self)
