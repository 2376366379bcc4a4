"""Attention of Hugging Face models that compute it inside their own modules.

DeBERTa-v2, GPT-Neo, BLOOM and Falcon do not call transformers' attention interface (what
:mod:`hookscope.transformer.recorder` listens to): each attention module multiplies, masks and
takes the softmax itself and returns ``(output, probs)``, the probabilities only when asked with
``output_attentions=True`` (DeBERTa) or always (the others). These modules are the innermost ones
whose ``forward`` takes an ``output_attentions`` argument, in a modeling file without the
interface (DeBERTa v1, XLM and Funnel the same way; MPT's are its blocks). A module that returns
something else second (XLNet's) is refused: read such a model with its own ``output_attentions``.

Inside :class:`OwnAttention` a pre-hook of each such module sets that one argument to True and a
forward hook takes the returned ``(B, heads, Tq, Tk)`` probabilities; where the caller had not
asked for them, the caller gets ``None`` in their place (DeBERTa's answer; the others' callers
drop them). These are the very tensors the model's own ``output_attentions=True`` returns (after
the attention dropout: call it in ``eval()``). The argument changes no arithmetic under
``attn_implementation="eager"``; under SDPA (Falcon's default) it would switch the module to its
eager branch, and outputs would move by ~1e-7, so such a model is refused with the fix: load it
with ``attn_implementation="eager"``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

from ..core.block import Block
from ..core.hooks import HandleGroup
from ..errors import CaptureError
from .recorder import implementations

Record = Callable[[nn.Module, Tensor], None]
FLAG = "output_attentions"


def own_attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of each module computing attention itself (see the module doc), in model order."""
    takes = {id(m) for m in model.modules() if _takes_flag(m)}
    found = []
    for name, module in model.named_modules():
        inner = any(id(m) in takes for m in module.modules() if m is not module)
        if id(module) in takes and not inner:
            found.append((name, module))
    return found


def _takes_flag(module: nn.Module) -> bool:
    """``module.forward`` names ``output_attentions`` and its modeling file has no attention interface."""
    source = sys.modules.get(type(module).__module__)
    if source is None or hasattr(source, "ALL_ATTENTION_FUNCTIONS"):
        return False
    try:
        return FLAG in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):  # a builtin or C forward has no signature to read
        return False


class OwnAttention(Block):
    """Inside the block, ``record(module, probs)`` for each call of ``modules`` (``core.block``)."""

    noun, remake = "attention reader", "hookscope.transformer.own.OwnAttention(model, modules, record)"

    def __init__(self, model: nn.Module, modules: list[tuple[str, nn.Module]], record: Record) -> None:
        super().__init__()
        others = sorted(implementations(model) - {"eager"})
        if others:
            raise CaptureError(
                f"{type(model).__name__} computes attention in its own modules and returns their weights only "
                f"when run eagerly, but it runs {', '.join(others)}; load it with attn_implementation='eager'"
            )
        self._modules, self._record = modules, record
        self._asked: dict[int, list[bool]] = {}  # id(module) -> per open call: whether the caller asked

    def _install(self, handles: HandleGroup) -> None:
        for _, module in self._modules:
            self._asked[id(module)] = []
            handles.on_forward_pre(module, self._before)
            handles.on_forward(module, self._after)

    def _before(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        bound = inspect.signature(module.forward).bind_partial(*args, **kwargs)
        self._asked[id(module)].append(bool(bound.arguments.get(FLAG, False)))
        bound.arguments[FLAG] = True
        return bound.args, bound.kwargs

    def _after(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        asked = self._asked[id(module)].pop()
        if not isinstance(output, tuple) or len(output) < 2:
            return None  # the forward raised (output None) or returned no weights: nothing to take
        probs = output[1]
        if not isinstance(probs, Tensor) or probs.dim() != 4:
            raise CaptureError(
                f"{type(module).__name__}, asked for output_attentions, returned {type(probs).__name__} second, "
                "where (B, heads, Tq, Tk) weights were expected; read them with model(..., output_attentions=True)"
            )
        self._record(module, probs.detach().clone())
        return None if asked else (output[0], None, *output[2:])
