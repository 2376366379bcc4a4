"""Inline views: every result shows itself in a notebook, drawn by the room that knows how.

The result classes live low in the house (``core``, ``stats``, ``store``) and their pictures are
drawn high (``report``, ``viz``), so a class cannot import its own drawing. A class mixes in
:class:`Shows`; the module that draws it registers a function with :func:`shows_as`. Jupyter, VS
Code and GitHub call ``_repr_html_``; with nothing registered it returns None and they fall back to
the one-line ``__repr__``. Importing :mod:`hookscope` imports the drawing modules, so a result
shows itself wherever it came from.

One result shape: every result has ``_repr_html_``; ``.table()`` (text) where it has rows and
``.plot()`` (a PIL image) where it has a picture, registered the same way
(``shows_as(cls, table=..., plot=...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import OptionError

if TYPE_CHECKING:
    from PIL.Image import Image

T = TypeVar("T")
Renderer = Callable[[Any], str]

_HTML: dict[type, Renderer] = {}
_PNG: dict[type, Callable[[Any], bytes | None]] = {}
_TABLE: dict[type, Callable[..., str]] = {}
_PLOT: dict[type, Callable[..., Any]] = {}
_SECTION: dict[type, Callable[[Any], tuple[str, str]]] = {}


def shows_as(
    cls: type,
    *,
    png: Callable[[Any], bytes | None] | None = None,
    table: Callable[..., str] | None = None,
    plot: Callable[..., Any] | None = None,
    section: Callable[[Any], tuple[str, str]] | None = None,
) -> Callable[[Renderer], Renderer]:
    """Register the decorated function as the HTML view of ``cls``; ``png`` as its notebook picture,
    ``table(obj, **options)`` as its ``.table()`` (text), ``plot(obj, **options)`` as its ``.plot()`` (PIL)
    and ``section(obj) -> (anchor, title)`` as where its view goes on a report page (``build_report(sections=)``).
    """

    def register(html: Renderer) -> Renderer:
        _HTML[cls] = html
        registries: tuple[tuple[dict[type, Any], Any], ...] = (
            (_PNG, png), (_TABLE, table), (_PLOT, plot), (_SECTION, section),
        )  # fmt: skip
        for registry, func in registries:
            if func is not None:
                registry[cls] = func
        return html

    return register


def _lookup(table: dict[type, Any], obj: object) -> Any:
    return next((table[k] for k in type(obj).__mro__ if k in table), None)


def html_of(obj: object) -> str | None:
    """The registered HTML view of ``obj``, or None when no room draws its class."""
    render = _lookup(_HTML, obj)
    return None if render is None else render(obj)


def section_of(obj: object) -> tuple[str, str, str] | None:
    """``(anchor, title, html)`` of ``obj`` as a section of a report page, or None when its class has none."""
    place = _lookup(_SECTION, obj)
    html = html_of(obj)
    return None if place is None or html is None else (*place(obj), html)


def sectioned() -> list[str]:
    """The names of the classes that can be a section of a report page, sorted."""
    return sorted(cls.__name__ for cls in _SECTION)


class Shows:
    """Mix-in: ``_repr_html_`` (and ``_repr_png_`` where a picture is registered) for notebooks.

    A result with rows defines ``def table(self, ...) -> str: return display.table_of(self, ...)`` and one
    with a picture ``def plot(self, ...) -> Image: return display.plot_of(self, ...)``, with its own options.
    """

    def _repr_html_(self) -> str | None:
        return html_of(self)

    def _repr_png_(self) -> bytes | None:
        draw = _lookup(_PNG, self)
        return None if draw is None else draw(self)


def table_of(obj: object, **options: Any) -> str:
    """The text table a room registered for ``obj``'s class (what ``obj.table()`` returns)."""
    return str(_registered(_TABLE, obj, "table")(obj, **options))


def plot_of(obj: object, **options: Any) -> Image:
    """The picture (a ``PIL.Image.Image``) a room registered for ``obj``'s class (what ``obj.plot()`` returns)."""
    image: Image = _registered(_PLOT, obj, "plot")(obj, **options)
    return image


def _registered(table: dict[type, Any], obj: object, what: str) -> Any:
    func = _lookup(table, obj)
    if func is None:
        raise OptionError(f"a {type(obj).__name__} has no .{what}(); it shows itself with _repr_html_ in a notebook")
    return func
