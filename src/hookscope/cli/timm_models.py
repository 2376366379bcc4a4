"""timm models on the command line: ``timm:NAME``, and the input a timm model's own config asks for.

``timm:NAME`` is ``timm.create_model(NAME, pretrained=False)``: nothing is downloaded, the weights
are random unless ``--weights`` loads a state dict. A model timm built through any spec
(``timm:NAME``, or ``package.module:function`` such as ``timm.models:vit_tiny_patch16_384``) carries
its ``pretrained_cfg``; ``timm_preprocess`` reads it through ``timm.data.resolve_data_config``, as
timm's own eval transform does: the input size, the resize before the centred crop
(``floor(size / crop_pct)``), the interpolation, mean and std. ``prepared_line`` says so on stderr,
once, with the flags that change it (``--size``, ``--mean``, ``--std``).
"""

from __future__ import annotations

import difflib
import importlib
import math
from typing import Any

from torch import nn

from ..errors import ModelError
from ..zoo.preprocess import Preprocess

FACTORY = "create_model"  # timm:create_model: the factory itself, which needs a name no spec can pass


def build_timm(name: str) -> nn.Module:
    """``timm.create_model(name, pretrained=False)``; a one-line ``ModelError`` for a name timm does not know."""
    try:
        timm = importlib.import_module("timm")
    except ImportError as err:
        raise ModelError("timm:NAME needs timm; run `pip install timm`") from err
    if name == FACTORY:
        raise ModelError(
            "timm:create_model needs a model name, which a spec cannot pass; write timm:NAME, such as "
            "timm:vit_tiny_patch16_224, which calls timm.create_model(NAME, pretrained=False)"
        )
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=3)
        hint = f"; closest: {', '.join(close)}" if close else "; `timm.list_models()` lists them"
        raise ModelError(f"timm has no model {name!r}{hint}")
    model: nn.Module = timm.create_model(name, pretrained=False)
    return model


def is_timm(model: nn.Module) -> bool:
    """True for a model timm built (it carries timm's ``pretrained_cfg``)."""
    return isinstance(getattr(model, "pretrained_cfg", None), dict) and type(model).__module__.startswith("timm.")


def timm_preprocess(model: nn.Module) -> Preprocess:
    """The preprocessing ``model``'s own ``pretrained_cfg`` asks for (``timm.data.resolve_data_config``)."""
    config: dict[str, Any] = importlib.import_module("timm.data").resolve_data_config(model=model)
    channels, height, width = config["input_size"]
    size = int(max(height, width))  # a square: hookscope's crops are square
    crop_pct = float(config.get("crop_pct") or 1.0)
    interpolation = "bicubic" if config.get("interpolation") == "bicubic" else "bilinear"
    return Preprocess(
        size=size, resize=math.floor(size / crop_pct), channels=int(channels), mean=tuple(config["mean"]),
        std=tuple(config["std"]), interpolation=interpolation,
    )  # fmt: skip


def prepared_line(name: str, own: Preprocess, used: Preprocess) -> str:
    """The stderr line saying how images were prepared for the timm model ``name``: as its config asks
    (``own``), or with the flags given (``used``), and the flags that change it."""
    line = f"hookscope: note: images prepared as {name}'s timm config (pretrained_cfg) asks: {_described(own)}"
    if used != own:
        return f"{line}; with --size, --mean, --std as given: {_described(used)}"
    return f"{line}; --size, --mean, --std change it"


def _described(preprocess: Preprocess) -> str:
    """``384x384 after a bicubic resize to 384, mean 0.5, 0.5, 0.5, std 0.5, 0.5, 0.5``."""
    mean, std = (", ".join(f"{v:g}" for v in values) for values in (preprocess.mean, preprocess.std))
    resize = f" after a {preprocess.interpolation} resize to {preprocess.resize}" if preprocess.resize else ""
    return f"{preprocess.size}x{preprocess.size}{resize}, mean {mean}, std {std}"
