"""Explaining a model as it predicts: ``evaluating(model)`` runs a block in eval mode and restores
every module's ``training`` flag in ``finally``.

::

    with evaluating(model, "cam()"):     # warns (CaptureWarning) when it switched a BatchNorm or Dropout
        out = model(x)                   # running statistics read, not updated; Dropout off
    model.training                       # as it was, module by module, even if the block raised

``cam``, ``attribute``, ``build_report`` and ``patch_sweep`` explain what the model predicts, which
is what it computes in eval mode: in training mode BatchNorm would normalise each batch by its own
statistics (mixing the images, and the stacked copies of a patch sweep) and update its running
ones, and Dropout would make every pass random. Each flag is set and restored on the module
itself, not through ``Module.train()``, which a subclass may override to do more (torchinfo does
the same per module; STYLE.md, Hooks 3).

``training_modules(model)`` names the modules whose output the flag changes: BatchNorm and
InstanceNorm with running statistics, Dropout with ``p > 0``, and ``MultiheadAttention`` and
recurrent layers with ``dropout > 0``. Only when one of them was in training mode is there
something to say; a model of Linear and ReLU modules computes the same in either mode.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

from ..errors import CaptureWarning

SHOWN = 4  # modules named in the warning


def training_modules(model: nn.Module) -> list[str]:
    """Names of the modules in training mode whose output depends on it (see the module doc)."""
    return [name or type(model).__name__ for name, module in model.named_modules() if _changes(module)]


def _changes(module: nn.Module) -> bool:
    """Whether ``module`` (in training mode) computes something else in eval mode."""
    if not module.training:
        return False
    if isinstance(module, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)):
        return bool(module.track_running_stats)
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return module.p > 0
    if isinstance(module, (nn.MultiheadAttention, nn.RNNBase)):
        return float(module.dropout) > 0
    return False


def mode_note(caller: str, switched: list[str]) -> str:
    """The sentence saying that ``caller`` ran the model in eval mode (``switched``: ``training_modules``)."""
    named = ", ".join(switched[:SHOWN]) + (f" and {len(switched) - SHOWN} more" if len(switched) > SHOWN else "")
    return (
        f"hookscope: the model was in training mode, so {caller} ran it in eval mode and then restored every "
        f"module's flag ({named} compute otherwise in training mode: BatchNorm by batch statistics, which it "
        "would also update, Dropout at random); call model.eval() first to silence this"
    )


@contextmanager
def evaluating(model: nn.Module, caller: str | None = None, *, wrappers: int = 0) -> Iterator[list[str]]:
    """Run the block with every module of ``model`` in eval mode, and restore each module's flag.

    Yields ``training_modules(model)`` as it was on entry. With ``caller`` (``"cam()"``) and such
    modules, a ``CaptureWarning`` (``mode_note``) points at the code that called the public function
    using the block (``wrappers``: the decorators between them, as in ``explain.notes.once_each``).
    Nested blocks find the model in eval mode already and say nothing."""
    switched = training_modules(model)
    if switched and caller is not None:
        # this generator, contextlib's __enter__, the public function, its wrappers, its caller
        warnings.warn(mode_note(caller, switched), CaptureWarning, stacklevel=4 + wrappers)
    flags = {module: module.training for module in model.modules()}
    try:
        for module in flags:
            module.training = False
        yield switched
    finally:
        for module, flag in flags.items():
            module.training = flag
