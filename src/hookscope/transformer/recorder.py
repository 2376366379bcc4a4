"""Recording the attention of a Hugging Face model without changing how it computes.

Every Hugging Face model since the attention refactor calls its attention through
``ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward)``
with the same arguments (``module, query, key, value, attention_mask, scaling=..., ...``). Inside
:class:`AttentionRecorder` the functions the model uses are wrapped under their own names in that
registry's local table (its ``__setitem__``, the documented way to override an implementation):
the wrapper calls the very function the model would have called, with the same arguments, and
returns its result untouched, so the model's outputs are bit for bit the ones outside the block.
Beside it the wrapper takes the attention probabilities: the eager function returns them; for
SDPA, flash and the rest :func:`~hookscope.transformer.weights.attention_probs` recomputes them
from the same queries, keys and mask.

Two things this does not do, on purpose. It does not switch the model to eager (that would
change its outputs by ~1e-5 and rename its implementation, which model code and the mask
functions read: a custom implementation without its mask function silently drops the padding
mask). And it never passes ``output_attentions=True``, which under SDPA logs a warning and then
raises ``IndexError`` in transformers 5.24 (transformers#31990, #38750).

Names stay the same, so mask creation and every ``_attn_implementation == "eager"`` test in
model code see what they saw. The wrapper is shared by every recorder active at once (nested
blocks, threads); it is installed by the first and taken out by the last, restoring the table
exactly (an earlier local override is put back, none is left behind). Modules of other models
pass through it unrecorded.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..base.optional import require
from ..core.block import Block
from ..core.hooks import HandleGroup
from ..errors import CaptureError
from .weights import attention_probs

AttentionFn = Callable[..., tuple[Tensor, Tensor | None]]
Record = Callable[[nn.Module, Tensor], None]

_LOCK = threading.Lock()
_ACTIVE: list[dict[int, Record]] = []  # one table per active recorder: id(module) -> what records it
_INSTALLED: dict[str, tuple[int, AttentionFn | None]] = {}  # name -> (users, the local entry it replaced)
_MISSING = object()


def implementations(model: nn.Module) -> set[str]:
    """The attention implementations the configs of ``model``'s modules name (``{"sdpa"}`` for a MiniLM)."""
    found: set[str] = set()
    for module in model.modules():
        impl = getattr(getattr(module, "config", None), "_attn_implementation", None)
        if isinstance(impl, str):
            found.add(impl)
    return found


def recording(model: nn.Module, record: Record) -> AttentionRecorder:
    """Inside the block, ``record(module, probs)`` for each attention call of one of ``model``'s modules.

    ``probs`` is ``(B, H, Tq, Tk)``, detached. Restores the registry in ``finally``.
    """
    return AttentionRecorder(model, record)


class AttentionRecorder(Block):
    """The block of ``recording``: the registry's entries wrapped on entry, put back on exit (``core.block``)."""

    noun, remake = "attention recorder", "hookscope.transformer.recorder.recording(model, record)"

    def __init__(self, model: nn.Module, record: Record) -> None:
        super().__init__()
        self.implementations = sorted(implementations(model))
        if not self.implementations:
            raise CaptureError(
                f"{type(model).__name__} has no Hugging Face config naming an attention implementation; "
                "hookscope.attention reads models that call transformers' attention interface"
            )
        self._table = {id(module): record for module in model.modules()}

    def _install(self, handles: HandleGroup) -> None:
        registry = require("transformers.modeling_utils").ALL_ATTENTION_FUNCTIONS
        for impl in self.implementations:
            handles.add(_Wrapped(registry, impl))
        handles.add(_Listening(self._table))


class _Wrapped:
    """``impl`` of the registry wrapped while this handle lives (shared by every active recorder)."""

    def __init__(self, registry: Any, impl: str) -> None:
        self._registry, self._impl = registry, impl
        with _LOCK:
            _install(registry, impl)
        self._installed = True

    def remove(self) -> None:
        with _LOCK:
            if self._installed:
                self._installed = False
                _uninstall(self._registry, self._impl)


class _Listening:
    """A recorder's table among the active ones while this handle lives."""

    def __init__(self, table: dict[int, Record]) -> None:
        self._table: dict[int, Record] | None = table
        with _LOCK:
            _ACTIVE.append(table)

    def remove(self) -> None:
        with _LOCK:
            if self._table is not None:
                _ACTIVE.remove(self._table)
                self._table = None


def _install(registry: Any, impl: str) -> None:
    users, replaced = _INSTALLED.get(impl, (0, None))
    if users == 0:
        local = registry._local_mapping  # read only to put an earlier local override back exactly
        replaced = local.get(impl, _MISSING)
        inner = None if impl == "eager" else registry[impl]
        registry[impl] = _wrapper(impl, inner)
    _INSTALLED[impl] = (users + 1, replaced)


def _uninstall(registry: Any, impl: str) -> None:
    users, replaced = _INSTALLED[impl]
    if users > 1:
        _INSTALLED[impl] = (users - 1, replaced)
        return
    del _INSTALLED[impl]
    if replaced is _MISSING:
        del registry[impl]
    else:
        registry[impl] = replaced


def _wrapper(impl: str, inner: AttentionFn | None) -> AttentionFn:
    """The function installed under ``impl``: ``inner`` (eager: the module's own) plus recording."""

    def attend(
        module: nn.Module, query: Tensor, key: Tensor, value: Tensor, mask: Any, *args: Any, **kwargs: Any
    ) -> Any:
        function = inner if inner is not None else eager_of(module)
        result = function(module, query, key, value, mask, *args, **kwargs)
        records = [table[id(module)] for table in _ACTIVE if id(module) in table]
        if records:
            returned = result[1] if isinstance(result, tuple) and len(result) > 1 else None
            probs = _probs(module, query, key, mask, returned, kwargs)
            for record in records:
                record(module, probs)
        return result

    attend.__name__ = f"hookscope_recorded_{impl.replace('|', '_')}"
    return attend


def _probs(module: nn.Module, query: Tensor, key: Tensor, mask: Any, returned: Any, kwargs: dict[str, Any]) -> Tensor:
    """The probabilities: as eager returned them (before dropout in eval), else recomputed."""
    if isinstance(returned, Tensor) and returned.dim() == 4 and not module.training:
        return returned.detach().clone()
    if mask is not None and not isinstance(mask, Tensor):
        raise CaptureError(
            f"cannot read an attention mask of type {type(mask).__name__} (flex attention's block masks); "
            "load the model with attn_implementation='sdpa' or 'eager'"
        )
    if kwargs.get("s_aux") is not None:
        raise CaptureError(
            f"{type(module).__name__} uses attention sinks, which its attention weights leave out of the softmax; "
            "load the model with attn_implementation='eager' to read its attention"
        )
    flag = kwargs.get("is_causal")
    causal = bool(getattr(module, "is_causal", True) if flag is None else flag)
    with torch.no_grad():
        return attention_probs(
            query.detach(),
            key.detach(),
            None if mask is None else mask.detach(),
            scaling=kwargs.get("scaling"),
            causal=causal,
            softcap=kwargs.get("softcap"),
            bias=kwargs.get("position_bias"),
            window=kwargs.get("sliding_window"),
        )


def eager_of(module: nn.Module) -> AttentionFn:
    """The eager attention of ``module``'s own modeling file (every refactored HF model has one)."""
    found = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    return found if callable(found) else _eager


def _eager(
    module: nn.Module, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, *args: Any, **kwargs: Any
) -> tuple[Tensor, Tensor]:
    """The textbook eager attention, for a modeling file that has no ``eager_attention_forward``."""
    scaling = kwargs.get("scaling") or 1 / math.sqrt(query.size(-1))
    probs = attention_probs(query, key, mask, scaling=scaling)
    probs = nn.functional.dropout(probs, p=float(kwargs.get("dropout", 0.0)), training=module.training)
    if value.shape[1] != probs.shape[1]:
        value = value.repeat_interleave(probs.shape[1] // value.shape[1], dim=1)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), probs
