"""hookscope inside training frameworks: callbacks that run ``watch`` (and ``nan_guard``) for you.

::

    from hookscope.integrations import HookscopeCallback              # Hugging Face Trainer (and TRL's)
    from hookscope.integrations.lightning import HookscopeCallback    # Lightning
    from hookscope.integrations.accelerate import watch_accelerate    # a plain Accelerate loop

``HookscopeCallback`` is loaded from ``integrations.trainer`` when first asked for, so importing
this package imports no framework.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "HookscopeCallback":
        from .trainer import HookscopeCallback

        return HookscopeCallback
    raise AttributeError(f"module 'hookscope.integrations' has no attribute {name!r}")
