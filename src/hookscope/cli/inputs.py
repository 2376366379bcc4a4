"""Input specs: image files and folders, tensor files, ``random:1x3x224x224``, as a model's input.

=============================  ==========================================================
spec                           what it becomes
=============================  ==========================================================
``cat.jpg`` (several allowed)  each image prepared for the model, stacked into a batch
``photos/``                    every image in the folder, sorted by name
``batch.pt``                   a tensor saved with ``torch.save`` (read with weights_only)
``inputs.pt`` (tuple or dict)  several tensors for a model with several inputs: a tuple (or
                               list) is passed as ``model(*inputs)``, a dict of named tensors
                               as ``model(**inputs)`` (``capture`` and ``list``; ``cam`` and
                               ``report`` explain one input tensor)
``batch.npy``                  a numpy array (``allow_pickle=False``)
``batch.safetensors``          its tensor named ``input``, or its only tensor
``random:1x3x224x224``         ``torch.randn`` of that shape, seed 0
=============================  ==========================================================

An image is prepared by a ``Preprocess`` (``hookscope.zoo.preprocess``: ``IMAGENET`` by default,
the model's own when the CLI loads one, see ``hookscope.cli.models``); the pictures for heatmaps
are the same crops, before normalisation. ``image_paths`` and ``open_image`` are shared with
``hookscope.cli.datasets``, which reads the same specs one image at a time for ``extract``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..base.optional import require
from ..errors import InputError
from ..zoo.preprocess import IMAGENET, Preprocess
from .formats import PICKLED, describe, file_format, load_failure, refused_global

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
TENSOR_SUFFIXES = (".pt", ".pth", ".npy", ".safetensors")


@dataclass(frozen=True)
class LoadedInput:
    """A batch ready for the model, the pictures it came from (if any), and their names."""

    x: Tensor
    pictures: list[Any] | None
    names: list[str]
    args: tuple[Tensor, ...] = ()  # a .pt of several tensors: the model's inputs (x is the first)
    kwargs: dict[str, Tensor] = field(default_factory=dict)  # a .pt of named tensors: its keyword inputs

    @property
    def several(self) -> bool:
        """True when the file held several inputs (a tuple or a dict), fed as ``model(*args, **kwargs)``."""
        return bool(self.args or self.kwargs)

    def feed(self, device: str | torch.device) -> tuple[tuple[Tensor, ...], dict[str, Tensor]]:
        """``(args, kwargs)`` to call the model with on ``device``: ``(x,)``, or the file's several inputs."""
        args = self.args if self.several else (self.x,)
        return tuple(a.to(device) for a in args), {k: v.to(device) for k, v in self.kwargs.items()}


def load_input(specs: Sequence[str], preprocess: Preprocess = IMAGENET) -> LoadedInput:
    """The batch that ``specs`` name (see the module docstring); one-line ``InputError`` otherwise."""
    if not specs:
        raise InputError("no input given; pass an image, a folder, a tensor file or random:1x3x224x224")
    if len(specs) == 1 and specs[0].startswith("random:"):
        return LoadedInput(_random(specs[0]), None, [specs[0]])
    if len(specs) == 1 and specs[0].lower().endswith(TENSOR_SUFFIXES):
        held, name = _tensor_file(Path(specs[0])), [Path(specs[0]).name]
        if isinstance(held, tuple):
            return LoadedInput(held[0], None, name, args=held)
        if isinstance(held, dict):
            return LoadedInput(next(iter(held.values())), None, name, kwargs=held)
        return LoadedInput(held, None, name)
    paths = [p for spec in specs for p in image_paths(Path(spec))]
    pictures = [open_image(p) for p in paths]
    x = torch.cat([preprocess.prepare(p) for p in pictures])
    return LoadedInput(x, [preprocess.show(row) for row in x], [p.name for p in paths])


def _random(spec: str) -> Tensor:
    match = re.fullmatch(r"random:(\d+(?:x\d+)*)", spec)
    if not match:
        raise InputError(f"{spec!r} is not a random input; write it as random:1x3x224x224")
    shape = [int(n) for n in match.group(1).split("x")]
    if min(shape) < 1 or torch.Size(shape).numel() > 2**31:
        raise InputError(f"{spec!r} has an empty or huge shape; every size must be between 1 and 2**31 elements")
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


def _tensor_file(path: Path) -> Tensor | tuple[Tensor, ...] | dict[str, Tensor]:
    if not path.is_file():
        raise InputError(f"tensor file {str(path)!r} does not exist")
    kind = file_format(path)  # read by what the file holds, whatever its suffix says
    if kind not in (*PICKLED, "npy", "safetensors"):
        what = describe(path) + ("" if kind in ("empty", "truncated") else ", not a tensor file")
        raise InputError(f"cannot read tensor file {str(path)!r}: it is {what}; save the tensor with "
                         "torch.save, numpy.save or safetensors")  # fmt: skip
    try:
        if kind == "npy":
            return torch.from_numpy(require("numpy").load(path, allow_pickle=False))
        if kind == "safetensors":
            tensors = require("safetensors.torch").load_file(str(path))
            return _one_tensor(tensors, path)
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except InputError:
        raise
    except Exception as err:
        refused = refused_global(err)
        why = (f"it holds pickled objects ({refused}), not tensors only; save the tensor itself" if refused
               else f"it is damaged ({load_failure(err)}); save it again")  # fmt: skip
        raise InputError(f"cannot read tensor file {str(path)!r}: {why}") from err
    return loaded if isinstance(loaded, Tensor) else _several(loaded, path)


def _several(loaded: object, path: Path) -> Tensor | tuple[Tensor, ...] | dict[str, Tensor]:
    """A ``.pt``'s tuple (or list) of tensors, or its dict of named tensors (``input`` alone: that tensor)."""
    if isinstance(loaded, (tuple, list)) and loaded and all(isinstance(t, Tensor) for t in loaded):
        return tuple(loaded)
    if isinstance(loaded, dict) and isinstance(loaded.get("input"), Tensor):
        return _one_tensor(loaded, path)
    if (
        isinstance(loaded, dict)
        and loaded
        and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in loaded.items())
    ):
        return dict(loaded)
    raise InputError(
        f"{str(path)!r} holds {type(loaded).__name__} of other things than tensors; save a tensor, a tuple of "
        "tensors (passed as model(*inputs)) or a dict of named tensors (model(**inputs))"
    )


def _one_tensor(loaded: object, path: Path) -> Tensor:
    if isinstance(loaded, dict):
        named = loaded.get("input")
        if isinstance(named, Tensor):
            return named
        tensors = [v for v in loaded.values() if isinstance(v, Tensor)]
        if len(tensors) == 1:
            return tensors[0]
    raise InputError(
        f"{str(path)!r} holds {type(loaded).__name__}, not one tensor; save the tensor itself or name it 'input'"
    )


def image_paths(path: Path) -> list[Path]:
    """``path`` itself, or the images of the folder ``path`` sorted by name; one-line ``InputError`` otherwise."""
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not found:
            raise InputError(f"folder {str(path)!r} holds no image ({', '.join(IMAGE_SUFFIXES)})")
        return found
    if path.suffix.lower() == ".txt" or (
        not path.exists() and " " in path.name and path.suffix.lower() not in IMAGE_SUFFIXES
    ):
        what = "a text file" if path.suffix.lower() == ".txt" else "text"
        raise InputError(f"{str(path)!r} is {what}, and this model reads images; text goes to a text model "
                         "(minilm, hf:PATH), images or tensor files to this one")  # fmt: skip
    if not path.exists():
        raise InputError(f"input {str(path)!r} does not exist")
    return [path]


def open_image(path: Path) -> Any:
    """The image file at ``path`` as an RGB PIL image, read whole; one-line ``InputError`` otherwise."""
    image = require("PIL.Image")
    try:
        with image.open(path) as opened:
            opened.load()
            return opened.convert("RGB")
    except (OSError, ValueError, SyntaxError) as err:  # Pillow's UnidentifiedImageError is an OSError
        raise InputError(f"cannot read image {str(path)!r}: {err}") from err


def size_hint(batch: LoadedInput, message: str) -> str:
    """The hint a forward error gets when it may be about the input's size (it names the input's side, a
    size, a height or a width): the flag or spec that sets the size, else an empty string."""
    if batch.several or batch.x.dim() != 4:
        return ""
    rows, channels, height, width = batch.x.shape
    if not re.search(rf"\b({height}|{width})\b|size|height|width", message, flags=re.IGNORECASE):
        return ""
    if batch.pictures is not None:
        return f"; the images were prepared at {height}x{width}: pass --size N with the side the model takes"
    if batch.names[0].startswith("random:"):
        return f"; the input is {height}x{width}: pass random:{rows}x{channels}xNxN with the side the model takes"
    return f"; the input tensor is {height}x{width}: save one of the size the model takes"
