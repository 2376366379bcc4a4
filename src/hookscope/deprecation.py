"""Old spellings of options, kept for one release: they work and warn with the new name.

::

    @renamed(layers="select", blocks="select")
    def attention(model, inputs, *, select=None): ...

    attention(model, x, layers="encoder.layer.1*")   # works; DeprecationWarning names select=
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import OptionError

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
                    warn_renamed(
                        f"{func.__name__}({old}=...)", f"{func.__name__}({new}=...)", stacklevel=2
                    )  # the caller of the wrapper
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
