"""Linear CKA from minibatches: Gram matrices and the unbiased HSIC estimator, pure functions.

Minibatch CKA (Nguyen, Raghu and Kornblith 2021, "Do Wide and Deep Networks Learn the Same
Things?", eq. 3) sums the unbiased HSIC estimator (Song et al. 2012) over minibatches::

    CKA(X, Y) = sum_i HSIC1(K_i, L_i) / sqrt(sum_i HSIC1(K_i, K_i) * sum_i HSIC1(L_i, L_i))

with ``K_i = X_i X_iᵀ`` the linear Gram matrix of batch ``i`` (``n`` rows, ``n > 3``) and::

    HSIC1(K, L) = [tr(K̃L̃) + 1ᵀK̃1 · 1ᵀL̃1 / ((n-1)(n-2)) - 2/(n-2) · 1ᵀK̃L̃1] / (n(n-3))

where ``K̃`` is ``K`` with its diagonal set to 0. HSIC1 is unbiased, so the sums converge to the
same value whatever the batch size; the biased estimator (centred Gram matrices) does not.

HSIC1 is unchanged when a constant is added to every row (it estimates a covariance), so each
batch is centred before its Gram matrix: the Gram matrix is then small and its float32 rounding
does not cancel away. Gram matrices are made in float32 (float64 stays float64) and everything
after them, the per-batch terms and their sums over batches, is float64.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def flat(features: Tensor) -> Tensor:
    """``(n, ...)`` -> ``(n, d)`` rows, centred over the batch, in float32 (float64 stays float64)."""
    rows = features.reshape(features.shape[0], -1)
    dtype = torch.float64 if rows.dtype == torch.float64 else torch.float32
    rows = rows.to(dtype)
    return rows - rows.mean(dim=0, keepdim=True)  # (n, d); HSIC1 does not see the shift


def gram(features: Tensor) -> Tensor:
    """The linear Gram matrix ``X Xᵀ`` of the centred rows of ``features``: ``(n, n)`` float64."""
    rows = flat(features)  # (n, d)
    return (rows @ rows.T).double()  # (n, n)


def hsic_terms(grams_a: Tensor, grams_b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """HSIC1 of every pair ``(a, b)``, of every ``(a, a)`` and of every ``(b, b)``, for one batch.

    ``grams_a``: ``(A, n, n)``, ``grams_b``: ``(B, n, n)``, float64. Returns ``(A, B)``, ``(A,)``, ``(B,)``.
    """
    n = grams_a.shape[-1]
    ka, kb = _zero_diagonal(grams_a), _zero_diagonal(grams_b)  # (A, n, n), (B, n, n)
    sum_a, sum_b = ka.sum(dim=(1, 2)), kb.sum(dim=(1, 2))  # (A,), (B,): 1ᵀK̃1
    col_a, col_b = ka.sum(dim=1), kb.sum(dim=1)  # (A, n), (B, n): K̃1 (symmetric)
    trace = ka.reshape(len(ka), -1) @ kb.reshape(len(kb), -1).T  # (A, B): tr(K̃L̃) = sum K̃ ∘ L̃
    cross = _combine(trace, torch.outer(sum_a, sum_b), col_a @ col_b.T, n)
    self_a = _combine(ka.square().sum(dim=(1, 2)), sum_a.square(), col_a.square().sum(dim=1), n)
    self_b = _combine(kb.square().sum(dim=(1, 2)), sum_b.square(), col_b.square().sum(dim=1), n)
    return cross, self_a, self_b


def _combine(trace: Tensor, sums: Tensor, cols: Tensor, n: int) -> Tensor:
    """HSIC1 from its three terms: tr(K̃L̃), 1ᵀK̃1·1ᵀL̃1 and 1ᵀK̃L̃1."""
    return (trace + sums / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * cols) / (n * (n - 3))


def _zero_diagonal(grams: Tensor) -> Tensor:
    out = grams.clone()
    out.diagonal(dim1=-2, dim2=-1).zero_()
    return out


def cka_of(cross: Tensor, self_a: Tensor, self_b: Tensor) -> Tensor:
    """CKA from HSIC1 summed over batches: ``cross[a, b] / sqrt(self_a[a] self_b[b])``, NaN where a
    representation is constant (its HSIC1 is 0); not clipped, so estimator noise stays visible."""
    scale = torch.outer(self_a, self_b).clamp(min=0).sqrt()  # (A, B)
    return torch.where(scale > 0, cross / scale, torch.full_like(cross, math.nan))
