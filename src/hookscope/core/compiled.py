"""Compiled models (``torch.compile``): their eager names and modules, and running them eagerly.

``torch.compile(model)`` returns an ``OptimizedModule`` that wraps the model: its names gain an
``_orig_mod.`` prefix, and its compiled code ignores hooks added after it was compiled (dynamo
does not guard on module hooks, ``torch._dynamo.config.skip_nnmodule_hook_guards``).
``model.compile()`` keeps the names but compiles ``model.__call__`` the same way. hookscope
therefore

* names modules as the eager model does: each wrapper is replaced by the module it wraps and
  ``_orig_mod`` leaves the names (``named_modules``); a name spelled with it is still accepted;
* runs a compiled model eagerly inside a capture (``run_eagerly``), with the public
  ``torch.compiler.set_stance("force_eager")``: every hook fires and values equal the eager
  model's; after the block the compiled code runs again, with no recompilation.

``DataParallel``, ``DistributedDataParallel`` and a DeepSpeed engine wrap a model the same way, under
``module.`` (``is_parallel``): their names are the wrapped model's too (``unwrap``, ``named_modules``);
a selector written with the ``module.`` prefix is still accepted (``hookscope.core.select``), and so is a
name looked up with it, or with ``_orig_mod.``, in a capture, a watch, a store (``plain_name``, ``EagerNames``).

The stance is process-wide: while a capture of a compiled model is open, every compiled model
and function of the process runs eagerly, in every thread.

A compiled train-step function (``torch.compile(step)``, the model called inside it) compiles the
optimizer's step and the model's call with whatever hooks they hold, so Dynamo would trace
hookscope's hooks too: graph breaks, guards on hookscope's own state and a recompilation per
step ("hit config.recompile_limit"). Hooks that stay through compiled steps are therefore marked
``out_of_trace`` (``torch.compiler.disable``: Dynamo calls them, it does not trace them), and
``dynamo_loaded`` tells a block that a compiled function may be running its model.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar, cast

import torch
from torch import nn

from ..errors import CompiledWarning

WRAPPED = "_orig_mod"  # the attribute (and name segment) of the module an OptimizedModule wraps
PARALLEL = (nn.DataParallel, nn.parallel.DistributedDataParallel)  # wrap their model as .module
ENGINE = "deepspeed.runtime.engine"  # the module of DeepSpeedEngine, which wraps its model as .module too
V = TypeVar("V")
F = TypeVar("F", bound=Callable[..., Any])


def wrapper_type() -> type[nn.Module] | None:
    """``OptimizedModule``, once ``torch.compile`` has been imported (before, nothing is compiled)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    found = getattr(eval_frame, "OptimizedModule", None)
    return found if isinstance(found, type) else None


def is_parallel(model: object) -> bool:
    """A ``DataParallel``, a DDP or a DeepSpeed engine: a wrapper of ``.module`` (DeepSpeed is never imported here)."""
    engine = getattr(sys.modules.get(ENGINE), "DeepSpeedEngine", None)
    return isinstance(model, PARALLEL) or (isinstance(engine, type) and isinstance(model, engine))


def unwrap(module: nn.Module) -> nn.Module:
    """The eager module behind ``torch.compile(module)`` (``module`` itself when it is not a wrapper)."""
    wrapper = wrapper_type()
    while is_parallel(module) or (wrapper is not None and isinstance(module, wrapper)):
        module = cast(nn.Module, module.module) if is_parallel(module) else getattr(module, WRAPPED)
    return module


def parallel_name(model: nn.Module, name: str) -> str:
    """``name`` without the ``module.`` prefix of a ``DataParallel`` / DDP / DeepSpeed ``model`` (else ``name``)."""
    if not is_parallel(model):
        return name
    return "" if name == "module" else name.removeprefix("module.")


def has_wrappers(model: nn.Module) -> bool:
    """True when ``model`` or a submodule is a ``torch.compile`` wrapper (names with ``_orig_mod``)."""
    wrapper = wrapper_type()
    return wrapper is not None and any(isinstance(m, wrapper) for m in model.modules())


def is_compiled(model: nn.Module) -> bool:
    """True when ``model`` or a submodule runs compiled code: a ``torch.compile`` wrapper, or ``.compile()``d."""
    if "torch._dynamo" not in sys.modules:  # torch.compile imports it: nothing can be compiled yet
        return False
    return has_wrappers(model) or any(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules())


def eager_name(name: str) -> str:
    """``name`` without its ``_orig_mod`` segments: ``"_orig_mod.0"`` -> ``"0"``, ``"_orig_mod"`` -> ``""``."""
    if WRAPPED not in name:
        return name
    return ".".join(part for part in name.split(".") if part != WRAPPED)


def eager_selector(selector: str) -> str:
    """A name, glob or ``re:`` pattern written with ``_orig_mod`` segments, without them."""
    if selector.startswith("re:"):
        return "re:" + selector[3:].replace(WRAPPED + r"\.", "").replace(WRAPPED + ".", "")
    return eager_name(selector)


def named_modules(
    model: nn.Module, *, wrappers: bool = False, remove_duplicate: bool = True
) -> list[tuple[str, nn.Module]]:
    """``model.named_modules()`` under the eager model's names.

    Each ``torch.compile`` wrapper is left out (the module it wraps takes its name) unless
    ``wrappers``; names lose their ``_orig_mod`` segments. A model with no wrapper is unchanged.
    """
    if is_parallel(model):  # DataParallel / DDP / DeepSpeed: the wrapped model's names
        return named_modules(cast(nn.Module, model.module), wrappers=wrappers, remove_duplicate=remove_duplicate)
    pairs = list(model.named_modules(remove_duplicate=remove_duplicate))
    wrapper = wrapper_type()
    if wrapper is None or not any(isinstance(m, wrapper) for _, m in pairs):
        return pairs
    return [(eager_name(n), m) for n, m in pairs if wrappers or not isinstance(m, wrapper)]


def plain_name(name: str) -> str:
    """``name`` as hookscope keys a site: without ``_orig_mod`` segments, nor the leading ``module.`` of a
    ``DataParallel``, DDP or DeepSpeed engine (``"module.0"`` -> ``"0"``, ``"module"`` -> ``""``)."""
    name = eager_name(name)
    return "" if name == "module" else name.removeprefix("module.")


def known_name(name: str, names: Collection[str]) -> str:
    """``name`` if it is one of ``names``, else its ``plain_name`` when that one is (else ``name``)."""
    if name in names or not isinstance(name, str):
        return name
    plain = plain_name(name)
    return plain if plain in names else name


class EagerNames(dict[str, V]):
    """A dict keyed by plain names that also finds a key spelled with ``_orig_mod.`` or a wrapper's ``module.``."""

    def __missing__(self, key: str) -> V:
        name = known_name(key, self)
        if name == key:
            raise KeyError(key)
        return self[name]


def eager_keyed(model: nn.Module | None, records: dict[str, V]) -> dict[str, V]:
    """``records`` (by eager name) as an ``EagerNames`` when ``model`` has ``torch.compile`` wrappers or is a
    ``DataParallel`` / DDP / DeepSpeed wrapper (``is_parallel``)."""
    wrapped = model is not None and (has_wrappers(model) or is_parallel(model))
    return EagerNames(records) if wrapped else records


def compiled_note(model: nn.Module | None, block: str = "capture") -> str | None:
    """The one line a ``block`` (a capture, an edit block, a nan_guard) of a compiled ``model`` warns
    (what it does, what it costs); None if not compiled."""
    if model is None or not is_compiled(model):
        return None
    name = type(unwrap(model)).__name__
    return (
        f"hookscope: {name!r} is compiled; inside this {block} it runs eagerly "
        "(torch.compiler.set_stance('force_eager'), for the whole process) so every hook fires: as fast as "
        "the eager model, and the compiled code is used again after the block"
    )


class Eagerly:
    """A block's hold on eager mode: while it is open a compiled ``model`` runs eagerly
    (``run_eagerly``) and one ``CompiledWarning`` (a ``CaptureWarning``) has said so; for an eager
    model, nothing.

    ``open()`` goes inside the block's ``__enter__`` try (a warning turned error undoes it all),
    ``close()`` in its ``finally`` (a second close does nothing). Used by ``capture``, ``edit``,
    ``nan_guard`` and the module graph's ``Tracer``; ``watch`` holds ``run_eagerly`` on its logged
    steps only. ``quiet_when_held``: no warning when another open block already runs the model
    eagerly (the tracer beside the report's capture: the capture has said so).
    """

    def __init__(self, model: nn.Module | None, block: str = "capture", *, quiet_when_held: bool = False) -> None:
        self.note = compiled_note(model, block)  # None unless the model is compiled
        self._quiet = quiet_when_held
        self._stack = ExitStack()

    def open(self) -> None:
        if self.note is not None:
            held = _STANCE.depth > 0
            self._stack.enter_context(run_eagerly())
            if not (held and self._quiet):
                warnings.warn(self.note, CompiledWarning, stacklevel=3)  # the user's `with` line

    def close(self) -> None:
        self._stack.close()


class _Stance:
    """The ``force_eager`` stance hookscope set, and how many open blocks still need it.

    Set when the first block opens, restored when the last one closes, in whatever order they
    close (``torch.compiler.set_stance`` itself restores only in LIFO order).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.restore: Any = None  # the set_stance object whose __exit__ puts back the stance before ours

    def enter(self) -> None:
        with self.lock:
            if self.depth == 0:
                self.restore = torch.compiler.set_stance("force_eager")  # sets it now; __exit__ restores
            self.depth += 1

    def exit(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                restore, self.restore = self.restore, None
                restore.__exit__(None, None, None)


_STANCE = _Stance()


@contextmanager
def run_eagerly() -> Iterator[None]:
    """Run every compiled model and function of the process eagerly until the block ends.

    ``torch.compiler.set_stance("force_eager")``: hooks added after a model was compiled fire,
    nothing is compiled or recompiled inside, and the compiled code is used again afterwards.
    Blocks nest and may overlap; the stance from before the first one is restored after the last.
    """
    _STANCE.enter()
    try:
        yield
    finally:
        _STANCE.exit()


def dynamo_loaded() -> bool:
    """True once ``torch.compile`` was imported in this process (before, nothing can be compiled)."""
    return "torch._dynamo" in sys.modules


def out_of_trace(hook: F) -> F:
    """``hook`` as Dynamo's to call, never to trace (``torch.compiler.disable``), once torch.compile is
    in use; ``hook`` itself before (importing Dynamo for it would cost seconds)."""
    if not dynamo_loaded():
        return hook
    disabled: F = torch.compiler.disable(hook, recursive=True)  # type: ignore[no-untyped-call]
    return disabled


def compiled_frames() -> bool:
    """True when ``torch.compile`` has compiled code in this process (dynamo's frame counter)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    try:
        return bool(counters is not None and counters.get("frames", {}).get("ok", 0))
    except (AttributeError, TypeError):  # the counters changed shape: no hint rather than an error
        return False
