"""Moved to ``hookscope.zoo.lenet``; this name forwards there, with a ``DeprecationWarning``, for one release."""

from __future__ import annotations

import warnings
from typing import Any

from .zoo import lenet as moved


def __getattr__(name: str) -> Any:
    warnings.warn(
        "hookscope.lenet moved to hookscope.zoo.lenet; import it as `from hookscope.zoo import lenet`",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(moved, name)
