"""Old spellings of options, kept for one release: they work and warn with the new name.

::

    @renamed(layers="select", blocks="select")
    def attention(model, inputs, *, select=None): ...

    attention(model, x, layers="encoder.layer.1*")   # works; DeprecationWarning names select=

Module paths of earlier versions (``hookscope.cams``, ``hookscope.report.top``, ...) are the table
:data:`MOVED`; ``import hookscope`` adds a finder that makes a forwarder when such a path is imported.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import OptionError

F = TypeVar("F", bound=Callable[..., Any])


def renamed(**old_to_new: str) -> Callable[[F], F]:
    """A decorator: keyword ``old`` is passed on as ``new``, with a ``DeprecationWarning`` naming ``new``.

    Passing both the old and the new name is an ``OptionError``.
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise OptionError(f"{func.__name__}() got both {old}= and {new}=; pass only {new}=")
                    warn_renamed(f"{func.__name__}({old}=...)", f"{func.__name__}({new}=...)", stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def warn_renamed(old: str, new: str, *, stacklevel: int = 2) -> None:
    """One ``DeprecationWarning``: ``old`` is now spelled ``new`` (works for one more release)."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; use {new}",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


# Module paths of earlier versions: each still imports, for one release, and warns with its new home.
MOVED = {
    "hookscope.cams": "hookscope.explain.cam",
    "hookscope.lenet": "hookscope.zoo.lenet",
    "hookscope.tokens": "hookscope.core.channels",
    "hookscope.files": "hookscope.base.files",
    "hookscope.text": "hookscope.base.words",
    "hookscope.display": "hookscope.base.display",
    "hookscope.optional": "hookscope.base.optional",
    "hookscope.deprecation": "hookscope.base.deprecation",
    "hookscope.report.top": "hookscope.probes.views",
    "hookscope.report.tokens": "hookscope.transformer.page",
    "hookscope.report.training": "hookscope.train.page",
    "hookscope.report.views": "hookscope.report.content",
    "hookscope.report.edits": "hookscope.edits.ablation",
    "hookscope.edits.block": "hookscope.edits.edit",
    "hookscope.viz.html": "hookscope.viz.fragments",
}


class _Forwarder(types.ModuleType):
    """A module path of an earlier version: its names are read from their new home, with a warning.

    Only a name the new module defines itself warns and forwards; any other is an ``AttributeError``,
    so tools that probe every module in ``sys.modules`` (pickle's ``whichmodule``, ``inspect``) stay quiet.
    """

    def __init__(self, old: str, new: str) -> None:
        super().__init__(old, f"Moved to ``{new}``; this path forwards there for one release.")
        self._new = new

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        home = importlib.import_module(self._new)
        value = getattr(home, name, None)
        if value is None or getattr(value, "__module__", self._new) != self._new:
            raise AttributeError(f"module {self.__name__!r} (now {self._new}) has no attribute {name!r}")
        warnings.warn(
            f"{self.__name__} moved to {self._new}; import from there (the old path works for one more release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return value


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the paths of :data:`MOVED` when they are imported (and only then), as forwarders."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _Forwarder(spec.name, MOVED[spec.name])

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: a forwarder reads its names from the new module when they are asked for."""


def forward_moved_modules() -> None:
    """Let ``import hookscope.cams`` (each path of :data:`MOVED`) still work: a finder at the end of
    ``sys.meta_path`` makes a forwarder when such a path is imported; nothing sits in ``sys.modules`` before."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
