"""Moved to ``hookscope.explain.cam``; this name forwards there, with a ``DeprecationWarning``, for one release."""

from __future__ import annotations

import warnings
from typing import Any

from .explain import cam as moved


def __getattr__(name: str) -> Any:
    warnings.warn(
        "hookscope.cams moved to hookscope.explain.cam (the maths and cam() in one module); "
        "import it as `from hookscope.explain import cam`",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(moved, name)
