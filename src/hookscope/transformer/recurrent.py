"""``hookscope.linear_attention``: one forward pass, every linear-attention layer read (``LinearAttention``).

The layers' calls are taken by a forward pre-hook (the hidden states and padding mask they were
called with) and a forward hook (what they returned); the gates are recomputed from those inputs
(:mod:`hookscope.transformer.readers`) and the recurrence run on them
(:mod:`hookscope.transformer.recurrence`). The model's own computation is untouched.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from ..core.block import Block
from ..core.hooks import HandleGroup
from ..core.select import Selector, modules_under
from ..errors import CaptureError, CaptureWarning
from . import views  # noqa: F401  (registers the table, picture, notebook view and section)
from .linear import LONGEST, LinearAttention, Recurrent
from .readers import DELTA, SCAN, fused_paths, linear_layers, read_gates
from .recurrence import delta_rule, delta_rule_mixing, duality_mixing, duality_scan, scan_mixing, selective_scan
from .text import encoded, input_ids, tokens_of


def linear_attention(
    model: nn.Module, inputs: Any, *, select: Selector | None = None, tokenizer: Any = None
) -> LinearAttention:
    """Run ``model`` on ``inputs`` once and read every linear-attention layer that ran (see module doc).

    ``inputs`` is what the model takes, as for ``hookscope.attention``: a ``BatchEncoding`` or dict,
    a ``(B, T)`` tensor of ids, or text with ``tokenizer=``. ``select`` keeps the linear layers it
    matches or that sit under a module it matches; None keeps all.

    Args:
        model: a model with GatedDeltaNet or Mamba layers, in eval mode.
        inputs: a ``BatchEncoding`` or dict, a ``(B, T)`` tensor of ids, or text with ``tokenizer``.
        select: which linear layers are kept; None keeps every one that ran.
        tokenizer: encodes text and names the tokens.

    Returns:
        A ``LinearAttention``.

    Raises:
        InputError: text without ``tokenizer``.
        SelectionError: ``select`` matches no module.
        CaptureError: the model has no linear-attention layer (among ``select``), or none of them ran.
    """
    inputs = encoded(inputs, tokenizer, caller="linear_attention")
    layers = _chosen(model, select)
    remarks = fused_paths(layers)
    with _Reading(layers) as reading, torch.no_grad():
        output = model(**inputs) if isinstance(inputs, Mapping) else model(inputs)
    if not reading.calls:
        raise CaptureError(f"none of {type(model).__name__}'s {len(layers)} linear-attention layers ran")
    calls = {name: _recurrent(name, module, kind, *called) for name, module, kind, *called in reading.calls}
    long = [name for name, call in calls.items() if call.mixing is None]
    if long:
        remarks.append(f"the mixing of {', '.join(long)} is left out: the sequence is over {LONGEST} tokens")
    for line in remarks:
        warnings.warn(line, CaptureWarning, stacklevel=2)
    mask = _mask(inputs, next(iter(calls.values())).state_norms)
    positions = [[str(i) for i in range(mask.shape[1])] for _ in range(mask.shape[0])]
    return LinearAttention(list(calls), calls, tokens_of(inputs, tokenizer) or positions, mask, output, remarks)


def _chosen(model: nn.Module, select: Selector | None) -> list[tuple[str, nn.Module, str]]:
    layers = linear_layers(model)
    if select is not None:
        wanted = {id(m) for _, m in modules_under(model, select)}
        layers = [layer for layer in layers if id(layer[1]) in wanted]
    if not layers:
        where = "" if select is None else f" under select={select!r}"
        raise CaptureError(
            f"{type(model).__name__} has no linear-attention layer{where} (GatedDeltaNet, Mamba, Mamba2); "
            "hookscope.attention reads softmax attention"
        )
    return layers


def _recurrent(name: str, module: nn.Module, kind: str, hidden: Tensor, mask: Any, output: Any) -> Recurrent:
    """The gates of one call, and the recurrence run on them."""
    gates = read_gates(module, kind, hidden, mask if isinstance(mask, Tensor) else None)
    short = gates.named["beta" if kind == DELTA else "dt"].shape[-1] <= LONGEST
    with torch.no_grad():
        if gates.query is not None and gates.key is not None:
            g, beta = gates.named["g"], gates.named["beta"]
            _, norms = delta_rule(gates.query, gates.key, gates.value, g, beta)
            decay = g.exp()
            mixing = delta_rule_mixing(gates.query, gates.key, g, beta) if short else None
        elif kind == SCAN:
            dt, a, b, c = (gates.named[key] for key in ("dt", "A", "B", "C"))
            _, norms = selective_scan(gates.value, dt, a, b, c)
            decay = (dt * a.amax(dim=-1)[None, :, None]).exp()  # (B, D, T)
            mixing = scan_mixing(dt, a, b, c) if short else None
        else:
            dt, a, b, c = (gates.named[key] for key in ("dt", "A", "B", "C"))
            _, norms = duality_scan(gates.value, dt, a, b, c)
            decay = (dt * a[None, :, None]).exp()  # (B, H, T)
            mixing = duality_mixing(dt, a, b, c) if short else None
    return Recurrent(name, type(module).__name__, kind, gates.named, decay, norms, gates.value, mixing, output)


def _mask(inputs: Any, norms: Tensor) -> Tensor:
    mask = inputs.get("attention_mask") if isinstance(inputs, Mapping) else None
    if isinstance(mask, Tensor) and mask.dim() == 2:
        return mask.bool().cpu()
    ids = input_ids(inputs)
    batch, length = ids.shape if ids is not None else (norms.shape[0], norms.shape[-1])
    return torch.ones(batch, length, dtype=torch.bool)


class _Reading(Block):
    """Each call of the layers: ``(name, module, kind, hidden states, attention mask, output)``, in call order."""

    noun, remake = "linear-attention reader", "hookscope.linear_attention(model, inputs)"

    def __init__(self, layers: list[tuple[str, nn.Module, str]]) -> None:
        super().__init__()
        self.layers = layers
        self.calls: list[tuple[str, nn.Module, str, Tensor, Any, Any]] = []
        self._pending: dict[int, list[tuple[Any, Any]]] = {}

    def _install(self, handles: HandleGroup) -> None:
        for name, module, kind in self.layers:
            self._pending[id(module)] = []
            handles.on_forward_pre(module, self._called)
            handles.on_forward(module, partial(self._returned, name, kind))

    def _release(self) -> None:
        self._pending.clear()

    def _called(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        hidden = args[0] if args else kwargs.get("hidden_states")
        self._pending[id(module)].append((hidden, kwargs.get("attention_mask")))

    def _returned(self, name: str, kind: str, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        hidden, mask = self._pending[id(module)].pop()
        if output is None or not isinstance(hidden, Tensor):
            return
        seen = sum(call[0].split("#")[0] == name for call in self.calls)
        label = f"{name}#{seen}" if seen else name
        kept = output.detach() if isinstance(output, Tensor) else output
        self.calls.append((label, module, kind, hidden.detach(), mask, kept))
