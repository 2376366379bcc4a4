"""What ``torch.inference_mode()`` and ``torch.func`` transforms take away, and the words for them.

An *inference tensor* (made under ``torch.inference_mode()``, the recommended evaluation context)
has no version counter: ``tensor._version`` raises. Hooks that tell an in-place change by the
counter (an edit that must not write into its input, a cached finiteness reading) read
``version(tensor)`` instead, which is ``INFERENCE`` for such a tensor: the caller then cannot tell,
and re-reads (``nan_guard``) or relies on what it can still see (``edit``: the same tensor returned).
``no_grad_context()`` names the context that turned gradients off, for messages.

Inside a ``torch.func`` transform (``vmap``, ``grad``, ``jacrev``...) a hook sees wrapped tensors
with no storage of their own (one per batch element, or one per level of differentiation): they
cannot be copied out as ordinary tensors. ``transform()`` names the transform running, so a hook
can step aside, say so, and leave the user's call as it is.

``torch.func.functional_call(model, params, x)`` runs the model with the tensors of ``params`` in
place of its parameters: the backward pass gives those tensors the gradients, and the module's own
parameters (where ``param_grad`` hooks sit) get none. ``swapped`` tells a hook that this is so.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

INFERENCE = -2  # the version of an inference tensor, which has none (a counter is never negative)


def version(tensor: Tensor) -> int:
    """``tensor._version``, or ``INFERENCE`` for an inference tensor (which has no counter)."""
    return INFERENCE if tensor.is_inference() else tensor._version


def no_grad_context() -> str:
    """``torch.inference_mode()`` or ``torch.no_grad()``: whichever turned gradients off now."""
    return "torch.inference_mode()" if torch.is_inference_mode_enabled() else "torch.no_grad()"


def transform() -> str | None:
    """The innermost ``torch.func`` transform running now (``"vmap"``, ``"grad"``, ``"jvp"``...), or None."""
    interpreter = torch._C._functorch.peek_interpreter_stack()
    return None if interpreter is None else interpreter.key().name.lower()


def swapped(module: nn.Module, hooked: Mapping[str, Tensor]) -> bool:
    """True when ``module`` runs with other tensors than the parameters ``hooked`` (name -> parameter)
    in their places: a ``torch.func.functional_call`` (``torch.nn.utils.stateless``) is running it."""
    return bool(hooked) and any(hooked.get(name, p) is not p for name, p in module.named_parameters())
