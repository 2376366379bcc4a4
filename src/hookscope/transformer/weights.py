"""Attention probabilities from queries, keys and a mask, as an eager attention computes them.

::

    probs = attention_probs(query, key, mask, scaling=0.125)   # (B, H, Tq, D), (B, Hk, Tk, D) -> (B, H, Tq, Tk)

SDPA, flash and other fused kernels never form the ``softmax(q k^T * scaling + mask)`` matrix, so
they cannot return it; this recomputes it from the same queries, keys and mask the kernel got.
The mask comes in any of the shapes Hugging Face's mask functions make: ``None`` (no padding; a
decoder then relies on ``causal``), a 4-D boolean mask (True attends), a 4-D additive float mask
(0 or the dtype's minimum, as eager gets it) or a 2-D ``(B, Tk)`` padding mask (flash). Masked
keys get the dtype's minimum added, as eager does, so a row with every key masked comes out
uniform exactly as eager's does, and every other row sums to 1 over its unmasked keys.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ShapeError


def attention_probs(
    query: Tensor,
    key: Tensor,
    mask: Tensor | None = None,
    *,
    scaling: float | None = None,
    causal: bool = False,
    softcap: float | None = None,
    bias: Tensor | None = None,
    window: int | None = None,
) -> Tensor:
    """``softmax(q k^T * scaling [+ bias] + mask)`` over the keys: ``(B, H, Tq, Tk)`` (see module doc).

    Grouped-query attention (fewer key heads than query heads) repeats each key head, as
    ``repeat_kv`` does. ``scaling`` defaults to ``1 / sqrt(head_dim)``; ``softcap`` caps the
    scores with ``tanh`` before the mask (Gemma 2); ``bias`` is an additive position bias (T5-style).
    ``causal`` masks key ``j > i`` for query ``i`` when ``mask`` carries no causality of its own
    (None or 2-D), and ``window`` keeps only the last ``window`` keys up to each query (a sliding
    window, Mistral-style) in the same case; a 4-D mask is used as it is.
    """
    if query.dim() != 4 or key.dim() != 4 or query.shape[-1] != key.shape[-1]:
        raise ShapeError(
            f"attention_probs needs (B, H, T, D) queries and keys with one head size, got {tuple(query.shape)} "
            f"and {tuple(key.shape)}"
        )
    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads != heads:
        key = key.repeat_interleave(heads // kv_heads, dim=1)  # (B, H, Tk, D), as repeat_kv
    scale = query.size(-1) ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(2, 3)) * scale  # (B, H, Tq, Tk), eager's own order of operations
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if bias is not None:
        scores = scores + bias
    additive = additive_mask(mask, scores.shape, causal=causal, window=window, dtype=scores.dtype, device=scores.device)
    if additive is not None:
        scores = scores + additive
    return scores.softmax(dim=-1)


def additive_mask(
    mask: Tensor | None,
    shape: torch.Size,
    *,
    causal: bool,
    window: int | None = None,
    dtype: torch.dtype,
    device: torch.device,
) -> Tensor | None:
    """The mask as eager adds it: 0 where a query attends, the dtype's minimum where not (or None: no mask)."""
    keep = _keep(mask, shape, causal=causal, window=window, device=device)
    if keep is None:
        return None if mask is None or mask.dtype == torch.bool or mask.dim() == 2 else mask.to(dtype)
    zero, floor = torch.zeros((), dtype=dtype, device=device), torch.finfo(dtype).min
    return torch.where(keep, zero, floor)


def _keep(
    mask: Tensor | None, shape: torch.Size, *, causal: bool, window: int | None, device: torch.device
) -> Tensor | None:
    """A boolean mask broadcastable to ``shape`` (True attends), or None for no mask / a float mask."""
    q_len, k_len = shape[-2], shape[-1]
    keep: Tensor | None = None
    if mask is not None and mask.dim() == 4:
        if mask.dtype != torch.bool:
            return None  # an additive float mask: used as it is
        return mask[..., -q_len:, -k_len:]
    if mask is not None:
        if mask.dim() != 2:
            raise ShapeError(f"an attention mask is 2-D (B, Tk) or 4-D (B, 1, Tq, Tk), got shape {tuple(mask.shape)}")
        keep = mask.to(device=device, dtype=torch.bool)[:, None, None, -k_len:]  # (B, 1, 1, Tk)
    rows = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)  # query i sits at key i, last aligned
    cols = torch.arange(k_len, device=device)[None, :]
    if causal and q_len > 1:
        keep = rows >= cols if keep is None else keep & (rows >= cols)  # (B | 1, 1, Tq, Tk)
    if window is not None:
        keep = rows - cols < window if keep is None else keep & (rows - cols < window)
    return keep
