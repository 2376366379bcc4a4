"""Optional dependencies, imported only inside the functions that need them.

``import hookscope`` needs torch alone; pictures need Pillow and matplotlib (``hookscope[viz]``).
A missing one raises an error that says which ``pip install`` fixes it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependencyError

_EXTRA = {"PIL": "viz", "matplotlib": "viz", "numpy": "viz"}


def require(module: str) -> ModuleType:
    """``importlib.import_module(module)``, or a one-line error naming the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        top = module.split(".")[0]
        extra = _EXTRA.get(top)
        fix = f"pip install 'hookscope[{extra}]'" if extra else f"pip install {top}"
        raise MissingDependencyError(f"this needs {top}, which is not installed; run `{fix}`") from err
