"""The one place that calls PyTorch's ``register_*`` hook functions, and the leak audit.

Every handle goes into a ``HandleGroup`` that a capture removes in ``finally``. This module
knows nothing of what the hooks store.

Gradients are taken with ``Tensor.register_hook`` on tensors a forward (pre-)hook sees,
never with ``register_full_backward_hook`` (it wraps inputs and outputs in views and raises
on in-place ops, pytorch/pytorch#61519) nor the deprecated ``register_backward_hook``
(wrong ``grad_input`` for multi-op modules, pytorch/pytorch#12331).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from .compiled import eager_name, has_wrappers, named_modules

PreHook = Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None]
ForwardHook = Callable[[nn.Module, tuple[Any, ...], Any], None]
GradHook = Callable[[Tensor], Tensor | None]  # a returned tensor replaces the gradient
ParamHook = Callable[[Tensor], None]


class HandleGroup:
    """The handles of one capture; ``remove()`` removes them all and may be called twice."""

    def __init__(self) -> None:
        self._handles: list[RemovableHandle] = []
        self._prune_at = 1024

    def __len__(self) -> int:
        return len(self._handles)

    def add(self, handle: RemovableHandle) -> None:
        self._handles.append(handle)
        if len(self._handles) >= self._prune_at:  # tensor hooks pile up over many calls
            self._handles = [h for h in self._handles if h.hooks_dict_ref() is not None]
            self._prune_at = 2 * len(self._handles) + 1024

    def remove(self) -> None:
        handles, self._handles = self._handles, []
        for handle in reversed(handles):
            handle.remove()

    def on_forward_pre(self, module: nn.Module, hook: PreHook) -> None:
        """``hook(module, args, kwargs)`` before ``module`` runs."""
        self.add(module.register_forward_pre_hook(hook, with_kwargs=True))

    def on_forward(self, module: nn.Module, hook: ForwardHook) -> None:
        """``hook(module, args, output)`` after ``module`` ran, also when its forward raised."""
        self.add(module.register_forward_hook(hook, always_call=True))

    def on_grad(self, tensor: Tensor, hook: GradHook) -> None:
        """``hook(grad)`` each time the gradient with respect to ``tensor`` is computed.

        A hook that returns a tensor replaces the gradient that flows on (guided backprop).
        """
        self.add(tensor.register_hook(hook))  # type: ignore[no-untyped-call]

    def on_param_grad(self, param: Tensor, hook: ParamHook) -> None:
        """``hook(param)`` after a backward pass accumulated into ``param.grad``."""
        self.add(param.register_post_accumulate_grad_hook(hook))  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class HookInfo:
    """A hook found on a model: where it sits, of which kind, and what it is."""

    where: str  # dotted module name ("" is the model), "name.weight" for a parameter, or "<global>"
    kind: str  # forward_pre, forward, backward_pre, backward, post_accumulate_grad
    hook: str  # the callable's qualified name and source location


_MODULE_HOOKS = (
    ("forward_pre", "_forward_pre_hooks"),
    ("forward", "_forward_hooks"),
    ("backward_pre", "_backward_pre_hooks"),
    ("backward", "_backward_hooks"),
)
_GLOBAL_HOOKS = tuple((kind, f"_global{attr}") for kind, attr in _MODULE_HOOKS)


def find_hooks(model: nn.Module) -> list[HookInfo]:
    """Every hook that anyone left on ``model``, its parameters, or torch's global module hooks.

    Use it to hunt leaks: after every hookscope capture this returns what was there before.
    A compiled model is searched whole (its ``torch.compile`` wrappers too) under its eager names.
    """
    found = [
        HookInfo("<global>", kind, hook_name(hook))
        for kind, attr in _GLOBAL_HOOKS
        for hook in getattr(torch.nn.modules.module, attr, {}).values()
    ]
    for name, module in named_modules(model, wrappers=True):
        for kind, attr in _MODULE_HOOKS:
            found += [HookInfo(name, kind, hook_name(h)) for h in getattr(module, attr, {}).values()]
    rename = eager_name if has_wrappers(model) else str
    for name, param in ((rename(n), p) for n, p in model.named_parameters()):
        hooks = getattr(param, "_post_accumulate_grad_hooks", None) or {}
        found += [HookInfo(name, "post_accumulate_grad", hook_name(h)) for h in hooks.values()]
    return found


def hook_name(hook: object) -> str:
    """``module.qualname (file.py:line)`` for a function; its repr for anything else."""
    func = getattr(hook, "func", hook)  # unwrap functools.partial
    func = getattr(func, "__func__", func)  # unwrap bound methods
    code = getattr(func, "__code__", None)
    name = getattr(func, "__qualname__", None) or repr(hook)
    module = getattr(func, "__module__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{module + '.' if module else ''}{name}{where}"
