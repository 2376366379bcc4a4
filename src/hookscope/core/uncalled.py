"""Why a selected module was never called: the cause read from the code that owns it, or the likely ones.

A hook runs when a module is called, ``module(x)``. A selected module without a call was passed over
by the module that holds it (its *owner*: the parent, or the parent of the ``ModuleList`` or
``ModuleDict`` it sits in). ``never_called(name, modules, idle)`` reads the owner's class source
(``inspect.getsource``) and state, and names the first cause that holds:

* the owner calls it as ``self.<name>.forward(...)``, which skips every hook;
* the owner reads one of its settings (``self.attn_dropout.p``) and does the work as a function:
  a Hugging Face attention passes its dropout's ``p`` to ``F.scaled_dot_product_attention`` (SDPA)
  or to its eager function, so GPT-2's ``attn_dropout`` never runs as a module;
* the owner calls it only under ``self.training``, and the model is in eval mode (an auxiliary head);
* the owner calls it on a branch this run did not take;
* the owner is an ``nn.Sequential``, which calls all it holds, or a selected module that was not
  called either: the cause is above it;
* the owner's code never names it: unused, or called from elsewhere on a path not taken.

Where the source cannot be read (the model itself, a class built in C), the likely causes are
listed, most likely first, with how to tell them apart.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Collection, Mapping
from functools import cache

from torch import nn

NEVER_CALLED = "it was never called inside the block"
LIKELY = (
    NEVER_CALLED + "; likely causes, most likely first: the code around it skipped it on this run (a branch, "
    "training mode only, an attention implementation that does its work as a function), it is not used, or it "
    "is called as module.forward(x), which skips hooks; read the forward of the module that holds it to tell"
)
CONTAINERS = (nn.ModuleList, nn.ModuleDict)


def never_called(name: str, modules: Mapping[str, nn.Module], idle: Collection[str]) -> str:
    """Why the module ``name`` of ``modules`` (the model's, by name) was never called; ``idle``: the
    selected modules that were not called either."""
    owner, attr = _owner(name, modules)
    if owner is None:
        return LIKELY
    above = [n for n in idle if n != name and (name.startswith(f"{n}.") or n == "")]
    if above:
        return f"{NEVER_CALLED}: it sits in {max(above, key=len)!r}, which was never called either"
    module = modules[owner]
    if isinstance(module, nn.Sequential):
        return (
            f"{NEVER_CALLED}: the nn.Sequential that holds it calls every module it holds, so that Sequential "
            "did not run in the block (or ran as .forward(x), which skips hooks)"
        )
    source = _source(type(module))
    if source is None or not attr.isidentifier():  # add_module takes names no code can write as self.<name>
        return LIKELY
    return _cause(type(module).__name__, module, attr, source)


def _cause(owner: str, module: nn.Module, attr: str, source: str) -> str:
    """The first cause that ``source``, the code of the class ``owner``, shows for ``self.<attr>``."""
    called = re.search(rf"\.{attr}\(", source) is not None
    elsewhere = f"; it calls self.{attr}(...) only on another path (a config option or branch)" if called else ""
    if re.search(rf"\.{attr}\.forward\(", source):
        how = f"calls it as self.{attr}.forward(...), which skips every hook; call self.{attr}(...)"
        return f"{NEVER_CALLED}: {owner} {how}"
    read = re.search(rf"self\.{attr}\.(\w+)\b(?!\s*\()", source)
    if read is not None:
        return (
            f"{NEVER_CALLED}: {owner}{_implementation(module)} reads self.{attr}.{read.group(1)} and does that work "
            f"as a function instead of calling it, so there is no module call to hook{elsewhere}; capture {owner}'s "
            "output instead"
        )
    if called and not module.training and _under_training(source, attr):
        return (
            f"{NEVER_CALLED}: {owner} calls it only in training mode and the model is in eval mode; call model.train()"
        )
    if called:
        return f"{NEVER_CALLED}: {owner} calls it only on a branch this run did not take (a condition or a flag)"
    return (
        f"{NEVER_CALLED}: {owner}'s code never names it: it is not used, or something else calls it on a path not taken"
    )


def _under_training(source: str, attr: str) -> bool:
    """Whether a call of ``self.<attr>`` in ``source`` sits under a test of ``self.training`` (on its
    line or on a line that opens a block around it, up to its method)."""
    lines = source.splitlines()
    for i, line in enumerate(lines):
        if not re.search(rf"\.{attr}\(", line):
            continue
        indent = len(line) - len(line.lstrip())
        for above in [line, *reversed(lines[:i])]:
            depth = len(above) - len(above.lstrip())
            if above is not line and (not above.strip() or depth >= indent):
                continue
            if "self.training" in above:
                return True
            indent = depth
            if above.lstrip().startswith("def "):
                break
    return False


def _owner(name: str, modules: Mapping[str, nn.Module]) -> tuple[str | None, str]:
    """The name of the module whose code would call ``name``, and the attribute it knows it by."""
    if name == "" or name not in modules:
        return None, name
    parent, _, attr = name.rpartition(".")
    while parent and isinstance(modules.get(parent), CONTAINERS):
        parent, _, attr = parent.rpartition(".")
    if isinstance(modules.get(parent), CONTAINERS):  # the model itself is a container: no code calls it
        return None, attr
    return parent, attr


def _implementation(module: nn.Module) -> str:
    """`` (attn_implementation='sdpa')`` when the module's Hugging Face config names its attention code."""
    found = getattr(getattr(module, "config", None), "_attn_implementation", None)
    return f" (attn_implementation={found!r})" if isinstance(found, str) else ""


def _source(cls: type) -> str | None:
    """The source of ``cls`` and the classes it inherits from below ``nn.Module``, or None (built in C, ...)."""
    return _sources(cls)


@cache
def _sources(cls: type) -> str | None:
    parts = []
    for klass in cls.__mro__:
        if klass in (nn.Module, object) or klass.__module__.startswith("torch.nn.modules.module"):
            continue
        try:
            parts.append(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
    return "\n".join(parts) or None
