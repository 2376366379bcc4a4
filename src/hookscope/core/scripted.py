"""TorchScript modules in a selection: torch registers no hook on them, so a block leaves them out.

``torch.jit.script(module)`` returns a ``RecursiveScriptModule`` whose ``register_forward_hook``
raises ``RuntimeError: register_forward_hook is not supported on ScriptModules`` (and its children
are script modules too). Before a block (``capture``, ``watch``, ``edit``, ``nan_guard``) registers
anything, ``hookable`` takes them out of what its selector matched:

* a script module the selector names itself (its dotted name, or the module object) is a
  ``SelectionError`` naming it and the fix: hook the eager module before scripting it, or select
  the eager module that calls it;
* script modules a glob, a type, a predicate or the default selection matched are left out with
  one ``CaptureWarning`` naming them and the same fix;
* a selection of script modules alone is a ``SelectionError``: there is nothing to hook.

The module that calls a script module is its nearest ancestor that is not one; its hooks see what
goes in and out of the scripted code.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
from torch import nn

from ..errors import CaptureWarning, SelectionError
from .compiled import named_modules
from .select import BLOCKS, Selector, is_pattern

SHOWN = 4  # script modules named in a message, then "..."
_PACKAGE = str(Path(__file__).resolve().parents[1])


def hookable(
    model: nn.Module, picked: list[tuple[str, nn.Module]], select: Selector | None, block: str
) -> list[tuple[str, nn.Module]]:
    """``picked`` (what ``select`` matched in ``model``) less its TorchScript modules (see the module)."""
    scripted = [(name, m) for name, m in picked if is_scripted(m)]
    if not scripted:
        return picked
    named = [name for name, m in scripted if _named(select, name, m)]
    if named:
        raise SelectionError(
            f"hookscope.{block}: {named[0]!r} is a TorchScript module (torch.jit.script), and torch registers no "
            f"hooks on one; {_fix(model, named[0])}"
        )
    kept = [(name, m) for name, m in picked if not is_scripted(m)]
    listed = _few([name for name, _ in scripted])
    if not kept:
        raise SelectionError(
            f"hookscope.{block}: every module selected is a TorchScript module ({listed}), and torch registers "
            f"no hooks on one; pass the eager model (before torch.jit.script)"
        )
    warnings.warn(
        f"hookscope.{block}: left out {len(scripted)} TorchScript module(s) ({listed}): torch registers no hooks "
        f"on a torch.jit.script module; {_fix(model, scripted[0][0])}",
        CaptureWarning,
        stacklevel=_user_level(),
    )
    return kept


def is_scripted(module: nn.Module) -> bool:
    """Whether ``module`` is a ``torch.jit.script`` module, on which torch registers no hook (a
    ``torch.jit.trace``'d module takes hooks: its own call is hooked, its parts never run as modules)."""
    return isinstance(module, torch.jit._script.RecursiveScriptModule)  # not re-exported by torch.jit for mypy


def _named(select: Selector | None, name: str, module: nn.Module) -> bool:
    """Whether ``select`` names ``module`` itself: its dotted name or the object, not a glob, type or predicate."""
    if select is None:
        return False
    entries = list(select) if isinstance(select, (list, tuple)) else [select]
    return any(
        entry is module or (isinstance(entry, str) and entry == name and entry != BLOCKS and not is_pattern(entry))
        for entry in entries
    )


def _fix(model: nn.Module, name: str) -> str:
    """The advice: hook the eager module, or select the nearest ancestor that is not scripted."""
    modules = dict(named_modules(model))
    parts = name.split(".") if name else []
    caller = next(
        (".".join(parts[:i]) for i in range(len(parts) - 1, -1, -1)
         if not isinstance(modules.get(".".join(parts[:i])), torch.jit.ScriptModule)),
        None,
    )  # fmt: skip
    where = (
        ""
        if caller is None
        else f", or select the eager module that calls it ({caller!r}" + (", the model)" if caller == "" else ")")
    )
    return f"to see inside, hook the eager module before scripting it{where}"


def _few(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _user_level() -> int:
    """The ``stacklevel`` of the first frame outside hookscope, counted from the caller of this function."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
