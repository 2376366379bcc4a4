"""Old spellings of options, kept for one release: they work and warn with the new name.

::

    @renamed(layers="select", blocks="select")
    def attention(model, inputs, *, select=None): ...

    attention(model, x, layers="encoder.layer.1*")   # works; DeprecationWarning names select=

Module paths of earlier versions (``hookscope.cams``, ``hookscope.report.top``, ...) are the table
:data:`MOVED`; ``import hookscope`` puts a forwarder for each in ``sys.modules``.
"""

from __future__ import annotations

import functools
import importlib
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
    """A module path of an earlier version: every attribute is read from its new home, with a warning."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__(old, f"Moved to ``{new}``; this path forwards there for one release.")
        self._new = new

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        warnings.warn(
            f"{self.__name__} moved to {self._new}; import from there (the old path works for one more release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(self._new), name)


def forward_moved_modules() -> None:
    """Put a forwarder in ``sys.modules`` for each path of :data:`MOVED`, so ``import hookscope.cams`` still works."""
    for old, new in MOVED.items():
        sys.modules.setdefault(old, _Forwarder(old, new))
