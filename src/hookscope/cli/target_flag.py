"""``--target``: what the Python API takes as ``target=`` (``hookscope.explain.targets``), in words a shell
can pass. ``report --grads``, ``capture`` with a gradient kind, and ``cam`` differentiate it.

===================  ===================================================================================
``--target``         the score of each input (row of the batch) that is differentiated
===================  ===================================================================================
``285``              the class 285 of a ``(batch, classes)`` output: ``output[:, 285]`` (the API's int)
``sum``              the sum of each row's outputs; ``mean``: their mean; ``norm``: their L2 norm
``0,5,2``            one position in each row: ``output[:, 0, 5, 2]`` (a negative index counts from the
                     end, written ``--target=-1,3``: argparse takes ``-1,3`` for an option; fewer
                     indices than the row has axes: the rest are summed)
``'[:, -1, 3]'``     a Python index into the whole output, batch axis first, of ints, ``a:b:c`` slices
                     and ``...``: each row's score is the sum of what it picks in that row (``[0, 7]``:
                     class 7 of the first row only; the other rows score 0)
``file.py:fn``       a function ``fn(output) -> (batch,) tensor`` from a file, or ``package.module:fn``
===================  ===================================================================================

Without ``--target`` the target is each row's top-1 class, which needs a ``(batch, classes)``
output; on any other output (a U-Net's mask, a language model's ``(batch, tokens, vocabulary)``)
``flag_words`` turns the API's error into one line that names ``--target`` and these forms. Each form
but the class reads the model's tensor at ``--output`` (else its first tensor, said in a warning).
A spec that is none of these is a usage error from ``parse_target`` (argparse's ``type=``).
"""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor

from ..errors import HookscopeError, TargetError
from ..explain.targets import Target, logits

FORMS = "N (a class), sum, mean, norm, 0,5,2 (a position in each row), '[:, -1, 3]' (an index), file.py:function"
REDUCTIONS = ("sum", "mean", "norm")
_SLICE = re.compile(r"(-?\d+)?:(-?\d+)?(?::(-?\d+)?)?")
Index = tuple[Any, ...]  # ints, slices and Ellipsis, as Python's indexing takes them


@dataclass(frozen=True)
class ShellTarget:
    """A ``--target`` that is not a class: ``target(output) -> (batch,)`` or ``()`` scores.

    Attributes:
        text: the spec as typed (``sum``, ``0,5,2``, ``[:, 3]``).
        reduce: ``sum``, ``mean`` or ``norm`` of what is picked in each row; ``sum`` for an index.
        index: the Python index applied to the whole output first (``()``: all of it).
    """

    text: str
    reduce: str = "sum"
    index: Index = ()

    def __call__(self, output: Any) -> Tensor:
        """The scores of ``output``: its picked values reduced per row (or to one value).

        Args:
            output: the model's output, or its tensor at ``--output``.

        Returns:
            A ``(batch,)`` tensor: each row's score (0 for a row an index does not pick).

        Raises:
            TargetError: the index does not fit the output's shape.
        """
        out = output if isinstance(output, Tensor) else logits(output)
        if self.index:
            picked = torch.zeros_like(out, dtype=torch.bool)
            try:
                picked[self.index] = True
            except IndexError as err:
                raise TargetError(
                    f"--target {self.text} does not index this output of shape {tuple(out.shape)}: {err}"
                ) from None
            out = torch.where(picked, out, torch.zeros((), dtype=out.dtype, device=out.device))
        flat = out.reshape(len(out), -1)
        if self.reduce == "norm":
            norms: Tensor = torch.linalg.vector_norm(flat, dim=1)
            return norms
        return flat.mean(dim=1) if self.reduce == "mean" else flat.sum(dim=1)

    def __str__(self) -> str:
        return f"--target {self.text}"


def parse_target(text: str) -> Target:
    """``--target``'s value as the API's ``target=`` (the module docstring's table); argparse's ``type=``.

    Args:
        text: the value as typed.

    Returns:
        An int (a class), a ``ShellTarget``, or the function a ``module:function`` spec names.

    Raises:
        argparse.ArgumentTypeError: a value that is none of the forms, or a function that cannot be imported.
    """
    spec = text.strip()
    if re.fullmatch(r"-?\d+", spec):
        return int(spec)
    if spec in REDUCTIONS:
        return ShellTarget(spec, reduce=spec)
    if re.fullmatch(r"-?\d+(\s*,\s*-?\d+)*\s*,?", spec):
        return ShellTarget(spec, index=(slice(None), *(int(i) for i in spec.rstrip(",").split(","))))
    if spec.startswith("[") and spec.endswith("]"):
        return ShellTarget(spec, index=_index(spec[1:-1], text))
    if ":" in spec and not spec.startswith(":"):
        return _function(spec)
    raise argparse.ArgumentTypeError(f"{text!r} is not a target; pass one of: {FORMS}")


def _index(inside: str, text: str) -> Index:
    """``:, -1, 3`` as ``(slice(None), -1, 3)``; anything but ints, slices and ``...`` is refused."""
    items: list[Any] = []
    for part in (p.strip() for p in inside.split(",")):
        if re.fullmatch(r"-?\d+", part):
            items.append(int(part))
        elif part == "...":
            items.append(Ellipsis)
        elif found := _SLICE.fullmatch(part.replace(" ", "")):
            items.append(slice(*(int(g) if g else None for g in found.groups())))
        else:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {part!r} is not an int, a slice (a:b:c) or ...; an index is written like '[:, -1, 3]'"
            )
    return tuple(items)


def _function(spec: str) -> Callable[[Any], Tensor]:
    """The callable ``file.py:function`` or ``package.module:function`` names, imported now."""
    from .models import user_attribute  # here: models imports torchvision and the zoo

    where, _, name = spec.rpartition(":")
    try:
        found = user_attribute(where, name, what="target")
    except HookscopeError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    if not callable(found):
        raise argparse.ArgumentTypeError(f"{spec!r} is a {type(found).__name__}, not a function of the output")
    return cast(Callable[[Any], Tensor], found)


@contextlib.contextmanager
def flag_words(target: Target) -> Iterator[None]:
    """Within it, a ``TargetError`` is said in the command line's words: naming ``--target`` and its forms.

    Args:
        target: the parsed ``--target`` (None when not given).

    Yields:
        Nothing; the body runs the model and its target.

    Raises:
        TargetError: the body's, reworded.
    """
    try:
        yield
    except TargetError as err:
        raise TargetError(_reworded(str(err), target)) from err


def _reworded(message: str, target: Target) -> str:
    """A class target's error on an output that is no ``(batch, classes)``: the default (or ``--target N``)
    named, with the forms that do apply; any other target error names ``--target`` as given."""
    found = re.match(r"a class target needs a \(batch, classes\) output, got shape (\([^)]*\))", message)
    if found and target is None:
        return (f"the model's output has shape {found.group(1)}, not (batch, classes), so the default target "
                f"(each row's top-1 class) cannot apply; choose what to explain with --target: {FORMS}")  # fmt: skip
    if found:
        return (f"--target {target} is a class, which needs a (batch, classes) output, and the model's has shape "
                f"{found.group(1)}; pass --target as one of: {FORMS}")  # fmt: skip
    if message.startswith("--target") or target is None:
        return message
    if message.startswith("target "):  # "target 1000 is not a class of this output (0..999)"
        return f"--{message}"
    return f"{target if isinstance(target, ShellTarget) else '--target'}: {message}"
