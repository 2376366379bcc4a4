"""The one place that calls PyTorch's ``register_*`` hook functions, and the leak audit.

Every handle goes into a ``HandleGroup`` that its block removes in ``finally``
(``hookscope.core.block``): module, tensor, parameter, autograd-node and optimizer step hooks.
This module knows nothing of what the hooks store.

Gradients are taken with ``Tensor.register_hook`` on tensors a forward (pre-)hook sees,
never with ``register_full_backward_hook`` (it wraps inputs and outputs in views and raises
on in-place ops, pytorch/pytorch#61519) nor the deprecated ``register_backward_hook``
(wrong ``grad_input`` for multi-op modules, pytorch/pytorch#12331).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim import optimizer as optimizers_module  # torch's global step hooks live here
from torch.utils.hooks import RemovableHandle

from .compiled import eager_name, has_wrappers, named_modules

PreHook = Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], Any]  # may return new (args, kwargs)
ForwardHook = Callable[[nn.Module, tuple[Any, ...], Any], Any]  # may return a new output
GradHook = Callable[[Tensor], Tensor | None]  # a returned tensor replaces the gradient
ParamHook = Callable[[Tensor], None]
NodeHook = Callable[[Any, Any], None]  # (grad_inputs, grad_outputs) of an autograd node
StepHook = Callable[[Optimizer, tuple[Any, ...], dict[str, Any]], None]


class Removable(Protocol):
    """A handle: torch's ``RemovableHandle``, or anything a block undoes the same way (``remove()``)."""

    def remove(self) -> None: ...


class HandleGroup:
    """The handles of one block; ``remove()`` removes them all and may be called twice."""

    def __init__(self) -> None:
        self._handles: list[Removable] = []
        self._prune_at = 1024

    def __len__(self) -> int:
        return len(self._handles)

    def add(self, handle: Removable) -> None:
        self._handles.append(handle)
        if len(self._handles) >= self._prune_at:  # tensor hooks pile up over many calls
            self._handles = [h for h in self._handles if not _gone(h)]
            self._prune_at = 2 * len(self._handles) + 1024

    def remove(self) -> None:
        handles, self._handles = self._handles, []
        for handle in reversed(handles):
            handle.remove()

    def on_forward_pre(self, module: nn.Module, hook: PreHook) -> None:
        """``hook(module, args, kwargs)`` before ``module`` runs."""
        self.add(module.register_forward_pre_hook(hook, with_kwargs=True))

    def on_forward(self, module: nn.Module, hook: ForwardHook, *, always_call: bool = True) -> None:
        """``hook(module, args, output)`` after ``module`` ran; with ``always_call``, also when its
        forward raised (``output`` is then None)."""
        self.add(module.register_forward_hook(hook, always_call=always_call))

    def on_grad(self, tensor: Tensor, hook: GradHook) -> None:
        """``hook(grad)`` each time the gradient with respect to ``tensor`` is computed.

        A hook that returns a tensor replaces the gradient that flows on (guided backprop).
        """
        self.add(tensor.register_hook(hook))  # type: ignore[no-untyped-call]

    def on_param_grad(self, param: Tensor, hook: ParamHook) -> None:
        """``hook(param)`` after a backward pass accumulated into ``param.grad``."""
        self.add(param.register_post_accumulate_grad_hook(hook))  # type: ignore[no-untyped-call]

    def on_node(self, node: Any, hook: NodeHook) -> None:
        """``hook(grad_inputs, grad_outputs)`` after the autograd ``node`` (a ``grad_fn``) ran."""
        self.add(node.register_hook(hook))

    def on_optimizer_step_pre(self, optimizer: Optimizer, hook: StepHook) -> None:
        """``hook(optimizer, args, kwargs)`` before each ``optimizer.step()``."""
        self.add(optimizer.register_step_pre_hook(hook))

    def on_optimizer_step_post(self, optimizer: Optimizer, hook: StepHook) -> None:
        """``hook(optimizer, args, kwargs)`` after each ``optimizer.step()`` (not for one a GradScaler skips)."""
        self.add(optimizer.register_step_post_hook(hook))


def _gone(handle: Removable) -> bool:
    """A torch handle whose hook dict was freed with its tensor: nothing left to remove."""
    return isinstance(handle, RemovableHandle) and handle.hooks_dict_ref() is None


@dataclass(frozen=True)
class HookInfo:
    """A hook found on a model: where it sits, of which kind, and what it is.

    Attributes:
        where: the dotted module name (``""`` is the model), ``"name.weight"`` for a parameter,
            ``"<optimizer 0: SGD>"``, ``"<tensor 0>"`` for a tensor passed in, or ``"<global>"``.
        kind: ``forward_pre``, ``forward``, ``backward_pre``, ``backward``, ``grad``,
            ``post_accumulate_grad``, ``optimizer_step_pre`` or ``optimizer_step_post``.
        hook: the callable's qualified name and source location.
    """

    where: str  # dotted module name ("" is the model), "name.weight" for a parameter, "<optimizer 0: SGD>",
    # "<tensor 0>" for a tensor given to find_hooks, or "<global>"
    kind: str  # forward_pre, forward, backward_pre, backward, grad, post_accumulate_grad,
    # optimizer_step_pre, optimizer_step_post
    hook: str  # the callable's qualified name and source location


_MODULE_HOOKS = (
    ("forward_pre", "_forward_pre_hooks"),
    ("forward", "_forward_hooks"),
    ("backward_pre", "_backward_pre_hooks"),
    ("backward", "_backward_hooks"),
)
_GLOBAL_HOOKS = tuple((kind, f"_global{attr}") for kind, attr in _MODULE_HOOKS)
_TENSOR_HOOKS = (("grad", "_backward_hooks"), ("post_accumulate_grad", "_post_accumulate_grad_hooks"))
_OPTIMIZER_HOOKS = (
    ("optimizer_step_pre", "_optimizer_step_pre_hooks"),
    ("optimizer_step_post", "_optimizer_step_post_hooks"),
)
_GLOBAL_OPTIMIZER_HOOKS = (
    ("optimizer_step_pre", "_global_optimizer_pre_hooks"),
    ("optimizer_step_post", "_global_optimizer_post_hooks"),
)


def find_hooks(
    model: nn.Module,
    *,
    optimizer: Optimizer | Iterable[Optimizer] = (),
    tensors: Tensor | Iterable[Tensor] = (),
) -> list[HookInfo]:
    """Every hook that anyone left on ``model``, its parameters, its optimizers, or torch's globals.

    Use it to hunt leaks: after every hookscope block this returns what was there before. Listed:
    the module hooks of every module and torch's global module hooks; the tensor hooks
    (``register_hook``, kind ``grad``) and post-accumulate hooks of every parameter; the step
    pre- and post-hooks of ``optimizer`` (one or several; where ``<optimizer i: SGD>``) and torch's global
    optimizer step hooks; the tensor hooks of each of ``tensors`` (where ``<tensor i>``, e.g. a loss
    or an output kept from inside a block). Hooks on autograd nodes (``grad_fn.register_hook``) live
    in torch's C++ graph and cannot be listed; those are the hooks reachable from Python. A compiled
    model is searched whole (its ``torch.compile`` wrappers too) under its eager names.

    Args:
        model: the network whose modules and parameters are searched.
        optimizer: one optimizer or several whose step hooks are listed too; none by default.
        tensors: one tensor or several (a loss, a kept output) whose tensor hooks are listed too.

    Returns:
        One ``HookInfo`` per hook found; empty when nothing is registered.
    """
    found = _global_hooks()
    for name, module in named_modules(model, wrappers=True):
        for kind, attr in _MODULE_HOOKS:
            found += [HookInfo(name, kind, hook_name(h)) for h in getattr(module, attr, {}).values()]
    rename = eager_name if has_wrappers(model) else str
    found += [info for n, p in model.named_parameters() for info in _tensor_hooks(rename(n), p)]
    for i, opt in enumerate([optimizer] if isinstance(optimizer, Optimizer) else optimizer):
        where = f"<optimizer {i}: {type(opt).__name__}>"
        for kind, attr in _OPTIMIZER_HOOKS:
            found += [HookInfo(where, kind, hook_name(h)) for h in getattr(opt, attr, {}).values()]
    for i, tensor in enumerate([tensors] if isinstance(tensors, Tensor) else tensors):
        found += _tensor_hooks(f"<tensor {i}>", tensor)
    return found


def _global_hooks() -> list[HookInfo]:
    """torch's process-wide module hooks and optimizer step hooks."""
    found = [
        HookInfo("<global>", kind, hook_name(hook))
        for kind, attr in _GLOBAL_HOOKS
        for hook in getattr(torch.nn.modules.module, attr, {}).values()
    ]
    for kind, attr in _GLOBAL_OPTIMIZER_HOOKS:
        found += [HookInfo("<global>", kind, hook_name(h)) for h in getattr(optimizers_module, attr, {}).values()]
    return found


def _tensor_hooks(where: str, tensor: Tensor) -> list[HookInfo]:
    return [
        HookInfo(where, kind, hook_name(h))
        for kind, attr in _TENSOR_HOOKS
        for h in (getattr(tensor, attr, None) or {}).values()
    ]


def hook_name(hook: object) -> str:
    """``module.qualname (file.py:line)`` for a function; its repr for anything else."""
    func = getattr(hook, "func", hook)  # unwrap functools.partial
    func = getattr(func, "__func__", func)  # unwrap bound methods
    code = getattr(func, "__code__", None)
    name = getattr(func, "__qualname__", None) or repr(hook)
    module = getattr(func, "__module__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{module + '.' if module else ''}{name}{where}"
