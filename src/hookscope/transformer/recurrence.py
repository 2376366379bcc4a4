"""The recurrences of linear-attention layers, and the token mixing they imply: pure functions.

A gated delta rule (GatedDeltaNet: Qwen3-Next, Qwen3.5) keeps one state ``S`` of ``(dk, dv)`` per
head and, at step ``t``, decays it, corrects what it predicts for the key and writes the value::

    S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,      o_t = S_t^T q_t

A selective scan (Mamba) keeps ``N`` numbers per channel ``d``, with ``dt`` its step size::

    h_t = exp(dt_t A) * h_{t-1} + dt_t B_t x_t,                            y_t = C_t . h_t

Mamba2's scan (state space duality) has one decay rate ``a`` per head and a ``(P, N)`` state::

    S_t = exp(dt_t a) S_{t-1} + dt_t x_t B_t^T,                            y_t = S_t C_t

Both are linear in their values, so the output is a token-to-token matrix applied to them
(Zimerman et al. 2024, "A Unified Implicit Attention Formulation"; Ali et al. 2024, "The Hidden
Attention of Mamba Models"): ``o_t = sum_j M[t, j] v_j`` with, for the delta rule,
``M[t, j] = beta_j q_t^T P_(t,j) k_j`` (``P_(t,j)`` the product of the steps ``j+1 .. t``), and for the
scan, per channel, ``M[t, j] = dt_j sum_n C_t[n] exp(A[n] (dt_(j+1) + ... + dt_t)) B_j[n]`` (Mamba2: per
head, ``(C_t . B_j) exp(a (dt_(j+1) + ... + dt_t)) dt_j``, the SSD paper's masked matrix). It is
lower-triangular (causal) and not a distribution: its rows need not sum to 1, and entries may be
negative. Memory is ``(B, H, T, T)``: compute it for short sequences.
"""

from __future__ import annotations

import torch
from torch import Tensor


def delta_rule(query: Tensor, key: Tensor, value: Tensor, g: Tensor, beta: Tensor) -> tuple[Tensor, Tensor]:
    """Run the gated delta rule step by step: its outputs and the state's Frobenius norm after each step.

    Args:
        query: ``(B, H, T, dk)``, already normalised and scaled as the layer uses it.
        key: ``(B, H, T, dk)``, already normalised.
        value: ``(B, H, T, dv)``.
        g: ``(B, H, T)``: the log decay of each step (``<= 0``).
        beta: ``(B, H, T)``: the write strength of each step, in (0, 1).

    Returns:
        ``(outputs (B, H, T, dv), state norms (B, H, T))``.
    """
    batch, heads, length, dk = key.shape
    state = key.new_zeros(batch, heads, dk, value.shape[-1])  # (B, H, dk, dv)
    outputs, norms = [], []
    for t in range(length):
        state = state * g[:, :, t].exp()[..., None, None]
        predicted = (state * key[:, :, t, :, None]).sum(dim=-2)  # (B, H, dv): S^T k
        delta = (value[:, :, t] - predicted) * beta[:, :, t, None]
        state = state + key[:, :, t, :, None] * delta[:, :, None, :]
        outputs.append((state * query[:, :, t, :, None]).sum(dim=-2))  # S^T q
        norms.append(state.flatten(2).norm(dim=-1))
    return torch.stack(outputs, dim=2), torch.stack(norms, dim=2)


def delta_rule_mixing(query: Tensor, key: Tensor, g: Tensor, beta: Tensor) -> Tensor:
    """``(B, H, T, T)``: ``M[t, j] = beta_j q_t^T P_(t,j) k_j``, so that the outputs are ``M @ value``.

    Args:
        query: ``(B, H, T, dk)``, as for :func:`delta_rule`.
        key: ``(B, H, T, dk)``.
        g: ``(B, H, T)`` log decays.
        beta: ``(B, H, T)`` write strengths.

    Returns:
        The implied token mixing, zero above the diagonal.
    """
    batch, heads, length, dk = key.shape
    carried = key.new_zeros(batch, heads, length, dk)  # row j: P_(t,j) beta_j k_j, carried to step t
    positions = torch.arange(length, device=key.device)
    rows = []
    for t in range(length):
        k_t = key[:, :, t]  # (B, H, dk)
        carried = carried * g[:, :, t].exp()[..., None, None]
        carried = carried - beta[:, :, t, None, None] * (carried @ k_t[..., None]) * k_t[:, :, None, :]
        written = (beta[:, :, t, None] * k_t)[:, :, None, :]  # (B, H, 1, dk)
        carried = torch.where((positions == t)[None, None, :, None], written, carried)
        rows.append(carried @ query[:, :, t, :, None])  # (B, H, T, 1): rows after t are still 0
    return torch.cat(rows, dim=-1).transpose(-1, -2)


def selective_scan(x: Tensor, dt: Tensor, a: Tensor, b: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """Run a selective scan step by step: its outputs (before the skip ``D x`` and the gate) and state norms.

    Args:
        x: ``(B, D, T)``: the scanned channels.
        dt: ``(B, D, T)``: each channel's step size (after softplus).
        a: ``(D, N)``: the state matrix's diagonal (negative).
        b: ``(B, T, N)``: what each step writes.
        c: ``(B, T, N)``: what each step reads.

    Returns:
        ``(outputs (B, D, T), state norms (B, D, T))``: the norm of each channel's ``N`` numbers.
    """
    state = x.new_zeros(x.shape[0], x.shape[1], a.shape[-1])  # (B, D, N)
    outputs, norms = [], []
    for t in range(x.shape[-1]):
        step = dt[:, :, t, None]  # (B, D, 1)
        state = (step * a).exp() * state + step * b[:, None, t] * x[:, :, t, None]
        outputs.append((state * c[:, None, t]).sum(dim=-1))
        norms.append(state.norm(dim=-1))
    return torch.stack(outputs, dim=-1), torch.stack(norms, dim=-1)


def scan_mixing(dt: Tensor, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """``(B, D, T, T)``: per channel, ``M[t, j]`` such that the scan's outputs are ``M @ x`` (see module doc).

    Args:
        dt: ``(B, D, T)`` step sizes.
        a: ``(D, N)`` state diagonal.
        b: ``(B, T, N)`` writes.
        c: ``(B, T, N)`` reads.

    Returns:
        The implied token mixing, zero above the diagonal.
    """
    length = dt.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=dt.device).tril()
    mixing = dt.new_zeros(*dt.shape, length)  # (B, D, T, T)
    for n in range(a.shape[-1]):  # one state dimension at a time: (B, D, T, T) in memory, never (.., N)
        walked = torch.cumsum(dt * a[None, :, n, None], dim=-1)  # (B, D, T): A[n] (dt_1 + ... + dt_t)
        gap = (walked[..., :, None] - walked[..., None, :]).masked_fill(~causal, -torch.inf)  # (B, D, T, T)
        reads_writes = c[:, None, :, None, n] * b[:, None, None, :, n]  # (B, 1, T, T): C_t[n] B_j[n]
        mixing = mixing + reads_writes * gap.exp()
    return mixing * dt[..., None, :]


def duality_scan(x: Tensor, dt: Tensor, a: Tensor, b: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """Run Mamba2's scan (one scalar decay per head) step by step: outputs before ``D x``, and state norms.

    ``S_t = exp(dt_t a) S_(t-1) + dt_t x_t B_t^T`` per head (``(P, N)``), ``y_t = S_t C_t``.

    Args:
        x: ``(B, H, T, P)``: each head's channels.
        dt: ``(B, H, T)``: step sizes (after softplus and the model's limits).
        a: ``(H,)``: each head's (negative) state decay rate.
        b: ``(B, H, T, N)``: what each step writes (a group's, repeated over its heads).
        c: ``(B, H, T, N)``: what each step reads.

    Returns:
        ``(outputs (B, H, T, P), state norms (B, H, T))``.
    """
    state = x.new_zeros(*x.shape[:2], x.shape[-1], b.shape[-1])  # (B, H, P, N)
    outputs, norms = [], []
    for t in range(x.shape[2]):
        step = dt[:, :, t, None, None]  # (B, H, 1, 1)
        state = (step * a[None, :, None, None]).exp() * state + step * x[:, :, t, :, None] * b[:, :, t, None, :]
        outputs.append(state @ c[:, :, t, :, None])  # (B, H, P, 1)
        norms.append(state.flatten(2).norm(dim=-1))
    return torch.cat(outputs, dim=-1).transpose(-1, -2), torch.stack(norms, dim=-1)


def duality_mixing(dt: Tensor, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """``(B, H, T, T)``: ``M[t, j] = (C_t . B_j) exp(a (dt_(j+1) + ... + dt_t)) dt_j``, so that outputs are ``M @ x``.

    Args:
        dt: ``(B, H, T)`` step sizes.
        a: ``(H,)`` decay rates.
        b: ``(B, H, T, N)`` writes.
        c: ``(B, H, T, N)`` reads.

    Returns:
        The implied token mixing, zero above the diagonal.
    """
    length = dt.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=dt.device).tril()
    walked = torch.cumsum(dt * a[None, :, None], dim=-1)  # (B, H, T)
    gap = (walked[..., :, None] - walked[..., None, :]).masked_fill(~causal, -torch.inf)
    return (c @ b.transpose(-1, -2)) * gap.exp() * dt[..., None, :]
