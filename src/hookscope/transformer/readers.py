"""Which modules are linear-attention layers, and their gates read from the input they were called with.

A linear-attention layer has no attention matrix: it runs a recurrence
(:mod:`hookscope.transformer.recurrence`). Three kinds are known by their parts:

- ``gated delta rule``: transformers' GatedDeltaNet (Qwen3-Next's ``in_proj_qkvz``/``in_proj_ba``,
  Qwen3.5's ``in_proj_qkv``/``in_proj_z``/``in_proj_b``/``in_proj_a``), with ``A_log``, ``dt_bias``, ``conv1d``;
- ``selective scan``: Mamba's mixer (``in_proj``, ``conv1d``, ``x_proj``, ``dt_proj``, ``A_log``, ``D``);
- ``state space duality``: Mamba2's mixer (``A_log``, ``dt_bias``, ``in_proj``, no ``x_proj``): one decay
  rate per head.

:func:`read_gates` recomputes what the layer feeds its recurrence from the hidden states it was
called with, with the layer's own weights and the torch arithmetic of transformers' fallback path
(padding zeroed, causal depthwise convolution, projections, gates). It calls no submodule, so no
hook of another block fires twice. The fused kernels (``flash-linear-attention``, ``causal-conv1d``,
``mamba-ssm``) compute the same numbers on the GPU, up to their rounding; :func:`fused_paths` names
the layers whose parts a kernel would run as functions, out of reach of module hooks.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..base.optional import require

DELTA, SCAN, DUALITY = "gated delta rule", "selective scan", "state space duality"
# Per kind: the package whose fused kernel, in training mode, takes the whole layer from its input projection
# on, and the parts the torch path calls as modules that this kernel runs as functions (their hooks never fire).
# flash-linear-attention's kernels replace functions only (the delta rule, the convolution): no module call is
# lost; conv1d and dt_proj are never called as modules on any path (capture says so when they are selected).
KERNELS = {SCAN: ("mamba_ssm", ("x_proj", "out_proj")), DUALITY: ("mamba_ssm", ("norm", "out_proj"))}


@dataclass(frozen=True)
class Gates:
    """What one call of a linear layer feeds its recurrence (shapes as :mod:`.recurrence` takes them).

    Attributes:
        kind: ``gated delta rule``, ``selective scan`` or ``state space duality``.
        named: the gates by their model names: ``beta``, ``g`` ``(B, H, T)``; Mamba's ``dt`` ``(B, D, T)``,
            ``A`` ``(D, N)``, ``B``, ``C`` ``(B, T, N)``; Mamba2's ``dt`` ``(B, H, T)``, ``A`` ``(H,)``, ``B``, ``C``
            ``(B, H, T, N)`` (each group's, repeated over its heads).
        query: the delta rule's ``(B, H, T, dk)`` queries (normalised, scaled); else None.
        key: the delta rule's ``(B, H, T, dk)`` keys (normalised); else None.
        value: ``(B, H, T, dv)`` values, Mamba's ``(B, D, T)`` channels, or Mamba2's ``(B, H, T, P)``.
    """

    kind: str
    named: dict[str, Tensor]
    query: Tensor | None
    key: Tensor | None
    value: Tensor


def kind_of(module: nn.Module) -> str | None:
    """The kind of linear layer ``module`` is (``gated delta rule``, ...), or None for any other module.

    Args:
        module: any module.

    Returns:
        Its kind, or None.
    """
    if not isinstance(getattr(module, "A_log", None), nn.Parameter) or not hasattr(module, "conv1d"):
        return None
    if hasattr(module, "dt_bias") and (hasattr(module, "in_proj_qkvz") or hasattr(module, "in_proj_qkv")):
        return DELTA
    if all(hasattr(module, part) for part in ("in_proj", "x_proj", "dt_proj", "D")):
        return SCAN
    return DUALITY if hasattr(module, "in_proj") and hasattr(module, "dt_bias") else None


def linear_layers(model: nn.Module) -> list[tuple[str, nn.Module, str]]:
    """``(name, module, kind)`` of every linear-attention layer of ``model``, in model order.

    Args:
        model: any model.

    Returns:
        The linear layers; empty for a model of softmax attention only.
    """
    found = []
    for name, module in model.named_modules():
        kind = kind_of(module)
        if kind is not None:
            found.append((name, module, kind))
    return found


def fused_paths(layers: list[tuple[str, nn.Module, str]]) -> list[str]:
    """A sentence per layer that will run a fused kernel past its parts' hooks (see ``KERNELS``).

    Args:
        layers: ``(name, module, kind)`` as :func:`linear_layers` gives them.

    Returns:
        One line per such layer (empty when no kernel package is installed or the model is in eval mode).
    """
    lines = []
    for name, module, kind in layers:
        package, parts = KERNELS.get(kind, ("", ()))
        if parts and module.training and installed(package):
            bypassed = ", ".join(f"{name}.{part}" for part in parts if hasattr(module, part))
            lines.append(
                f"{name} ({type(module).__name__}) runs {package}'s fused kernel in training mode: {bypassed} run "
                f"inside it as functions, so hooks on those modules do not fire (hooks on {name} itself do); "
                "call model.eval() to keep them"
            )
    return lines


def installed(package: str) -> bool:
    """Whether ``package`` can be imported (checked without importing it).

    Args:
        package: a top-level package name.

    Returns:
        True when it is installed.
    """
    return importlib.util.find_spec(package) is not None


def read_gates(module: nn.Module, kind: str, hidden: Tensor, mask: Tensor | None) -> Gates:
    """Recompute what ``module`` fed its recurrence when called on ``hidden`` ``(B, T, C)`` (see module doc).

    Args:
        module: a linear layer of kind ``kind``.
        kind: ``gated delta rule``, ``selective scan`` or ``state space duality``.
        hidden: the hidden states it was called with.
        mask: the ``(B, T)`` padding mask it was called with (1 = a real token), or None.

    Returns:
        Its ``Gates``.
    """
    with torch.no_grad():
        if mask is not None and mask.dim() == 2:
            hidden = (hidden * mask[:, :, None]).to(hidden.dtype)  # the layer zeroes padding first
        if kind == DELTA:
            return _delta_gates(module, hidden)
        return _scan_gates(module, hidden, mask) if kind == SCAN else _duality_gates(module, hidden, mask)


def _project(layer: Any, x: Tensor) -> Tensor:
    """``layer``'s linear map of ``x``, without calling it (no hook fires)."""
    bias = getattr(layer, "bias", None)
    return F.linear(x, layer.weight, bias if isinstance(bias, Tensor) else None)


def _causal_conv(module: Any, channels: Tensor) -> Tensor:
    """``(B, C, T)`` through the layer's depthwise causal ``conv1d`` and its activation, as the torch path."""
    conv = module.conv1d
    bias = conv.bias if isinstance(conv.bias, Tensor) else None
    out = F.conv1d(channels.to(conv.weight.dtype), conv.weight, bias, padding=conv.weight.shape[-1] - 1,
                   groups=channels.shape[1])[:, :, : channels.shape[-1]]  # fmt: skip
    activation = require("transformers.activations").ACT2FN[module.activation]
    return activation(out).to(channels.dtype)  # type: ignore[no-any-return]


def _delta_gates(module: Any, x: Tensor) -> Gates:
    batch, length, _ = x.shape
    if hasattr(module, "in_proj_qkvz"):  # Qwen3-Next: heads interleaved, the layer's own method sorts them
        parts = module.fix_query_key_value_ordering(_project(module.in_proj_qkvz, x), _project(module.in_proj_ba, x))
        query, key, value, _, b, a = parts
        mixed = torch.cat([t.reshape(batch, length, -1) for t in (query, key, value)], dim=-1)
    else:  # Qwen3.5
        mixed = _project(module.in_proj_qkv, x)
        b, a = _project(module.in_proj_b, x), _project(module.in_proj_a, x)
    mixed = _causal_conv(module, mixed.transpose(1, 2)).transpose(1, 2)
    query, key, value = torch.split(mixed, [module.key_dim, module.key_dim, module.value_dim], dim=-1)
    heads = module.num_v_heads
    query, key = (t.reshape(batch, length, -1, module.head_k_dim).float() for t in (query, key))
    if query.shape[2] != heads:  # grouped: each key head serves consecutive value heads
        query, key = (t.repeat_interleave(heads // t.shape[2], dim=2) for t in (query, key))
    key = key * torch.rsqrt((key * key).sum(dim=-1, keepdim=True) + 1e-6)
    query = query * torch.rsqrt((query * query).sum(dim=-1, keepdim=True) + 1e-6) / query.shape[-1] ** 0.5
    value = value.reshape(batch, length, heads, module.head_v_dim).float()
    beta = b.reshape(batch, length, heads).sigmoid().float()
    g = -module.A_log.float().exp() * F.softplus(a.reshape(batch, length, heads).float() + module.dt_bias)
    named = {"beta": beta.transpose(1, 2), "g": g.transpose(1, 2)}  # (B, H, T)
    return Gates(DELTA, named, query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2))


def _scan_gates(module: Any, x: Tensor, mask: Tensor | None) -> Gates:
    channels = _project(module.in_proj, x).transpose(1, 2).chunk(2, dim=1)[0]  # (B, D, T); the gate is not scanned
    channels = _causal_conv(module, channels).transpose(1, 2)  # (B, T, D)
    if mask is not None and mask.dim() == 2:
        channels = (channels * mask[:, :, None]).to(channels.dtype)
    rank, size = module.time_step_rank, module.ssm_state_size
    step, b, c = torch.split(_project(module.x_proj, channels), [rank, size, size], dim=-1)
    dt = module.dt_proj.weight @ step.transpose(1, 2) + module.dt_proj.bias.float()[:, None]
    named = {"dt": F.softplus(dt).float(), "A": -module.A_log.float().exp(), "B": b.float(), "C": c.float()}
    return Gates(SCAN, named, None, None, channels.transpose(1, 2).float())


def _duality_gates(module: Any, x: Tensor, mask: Tensor | None) -> Gates:
    batch, length, _ = x.shape
    heads, size, groups = module.num_heads, module.ssm_state_size, module.n_groups
    gate_width = module.intermediate_size
    widths = [int(gate_width), int(module.conv_dim), int(heads)]
    _, channels, dt = torch.split(_project(module.in_proj, x), widths, dim=-1)
    channels = _causal_conv(module, channels.transpose(1, 2)).transpose(1, 2)  # (B, T, conv_dim)
    if mask is not None and mask.dim() == 2:
        channels = (channels * mask[:, :, None]).to(channels.dtype)
    values, b, c = torch.split(channels, [gate_width, groups * size, groups * size], dim=-1)
    low, high = module.time_step_limit
    step = F.softplus(dt.float() + module.dt_bias).clamp(low, high).transpose(1, 2)  # (B, H, T)
    b, c = (t.reshape(batch, length, groups, size).repeat_interleave(heads // groups, dim=2) for t in (b, c))
    named = {
        "dt": step,
        "A": -module.A_log.float().exp(),
        "B": b.transpose(1, 2).float(),
        "C": c.transpose(1, 2).float(),
    }
    value = values.reshape(batch, length, heads, module.head_dim).transpose(1, 2).float()  # (B, H, T, P)
    return Gates(DUALITY, named, None, None, value)
