"""Where an edit's values come from: a mean (of statistics, a tensor, the batch), another run's
tensor at the same site, kind, key and call, a vector laid along one dimension; each checked to
fit the tensor it edits, with an ``EditError`` naming the place when it does not."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..errors import EditError
from ..stats.streaming import RunningStats


@dataclass(frozen=True)
class Where:
    """Where an edit is applied: the site, the kind, the key of the tensor and the call's index.

    Attributes:
        site: the module's dotted name.
        kind: ``output``, ``input`` or ``grad_output``.
        key: the tensor's key in the value (``out``, ``args[0]``...).
        call: the call's index at that site (0 first).
    """

    site: str
    kind: str
    key: str
    call: int

    def __str__(self) -> str:
        return f"{self.site!r} {self.kind} {self.key} (call {self.call})"


def laid_along(vector: Tensor | float, tensor: Tensor, dim: int | None, where: Where) -> Tensor:
    """A (D,) vector shaped to broadcast along ``dim`` of ``tensor``; anything else as it is."""
    if not isinstance(vector, Tensor) or vector.dim() != 1 or tensor.dim() < 2:
        return torch.as_tensor(vector)
    n = len(vector)
    if dim is None:
        fits = [d for d in (tensor.dim() - 1, 1) if tensor.shape[d] == n]
        if not fits:
            raise EditError(
                f"edits.add: a vector of {n} fits neither the last dim nor dim 1 at {where} "
                f"(shape {tuple(tensor.shape)}); pass dim="
            )
        dim = fits[0]
    if tensor.shape[dim] != n:
        raise EditError(f"edits.add: a vector of {n} does not fit dim {dim} at {where} (shape {tuple(tensor.shape)})")
    shape = [1] * tensor.dim()
    shape[dim] = n
    return vector.reshape(shape)


def mean_of(source: Any, tensor: Tensor, where: Where) -> Tensor:
    if source is None:
        return tensor.mean(dim=0, keepdim=True)
    if isinstance(source, Tensor):
        return broadcastable(source, tensor, where, "mean")
    if not isinstance(source, RunningStats):
        source = stats_of(source, where)
    if source.channels is None or source.channel_dim is None:
        return torch.tensor(source.mean, dtype=torch.float64)
    means = source.channels.mean  # (C,) one mean per channel along channel_dim
    dim = source.channel_dim % tensor.dim()
    if tensor.shape[dim] != len(means):
        raise EditError(
            f"edits.mean: {len(means)} channel means along dim {dim} at {where}, shape {tuple(tensor.shape)}"
        )
    shape = [1] * tensor.dim()
    shape[dim] = len(means)
    reshaped: Tensor = means.reshape(shape)
    return reshaped


def stats_of(source: Any, where: Where) -> RunningStats:
    """The site's statistics in a store (``Run.stats``) or a statistics table ``{(site, kind, key): stats}``."""
    if hasattr(source, "stats") and callable(source.stats):
        found = source.stats(where.site, where.kind, where.key)
        if isinstance(found, RunningStats):
            return found
    if isinstance(source, Mapping):
        found = source.get((where.site, where.kind, where.key))
        if isinstance(found, RunningStats):
            return found
        raise EditError(f"edits.mean: the statistics hold no ({where.site!r}, {where.kind!r}, {where.key!r})")
    raise EditError(
        f"edits.mean takes a RunningStats, a store, its statistics() or a tensor, got {type(source).__name__}"
    )


def value_of(value: Any, tensor: Tensor, where: Where) -> Tensor:
    if isinstance(value, Tensor):
        return broadcastable(value, tensor, where, "replacement")
    if not isinstance(value, Mapping):
        raise EditError(f"edits.replace takes a tensor, a Capture or a Run, got {type(value).__name__}")
    if where.site not in value:
        raise EditError(f"edits.replace: the run given holds no site {where.site!r}; capture it there too")
    calls = value[where.site].calls
    if where.call >= len(calls):
        raise EditError(
            f"edits.replace: the run given has {len(calls)} call(s) of {where.site!r}, not call {where.call}"
        )
    return broadcastable(calls[where.call].get(where.kind, where.key), tensor, where, "replacement")


def broadcastable(value: Tensor, tensor: Tensor, where: Where, what: str) -> Tensor:
    try:
        shape = torch.broadcast_shapes(value.shape, tensor.shape)  # type: ignore[no-untyped-call]
    except RuntimeError:
        raise EditError(
            f"the {what} of shape {tuple(value.shape)} does not fit {tuple(tensor.shape)} at {where}"
        ) from None
    if shape != tensor.shape:
        raise EditError(f"the {what} of shape {tuple(value.shape)} would grow {tuple(tensor.shape)} at {where}")
    return value


def projected_out(direction: Tensor, tensor: Tensor, where: Where) -> Tensor:
    """``tensor`` less its component in the span of ``direction`` ((*S) or (k, *S), S its trailing shape)."""
    n = direction.dim()
    if n <= tensor.dim() and tuple(direction.shape) == tuple(tensor.shape[tensor.dim() - n :]):
        trailing, rows = n, direction.reshape(1, -1)
    elif 2 <= n <= tensor.dim() + 1 and tuple(direction.shape[1:]) == tuple(tensor.shape[tensor.dim() - n + 1 :]):
        trailing, rows = n - 1, direction.reshape(direction.shape[0], -1)
    else:
        raise EditError(
            f"edits.project_out: a direction of shape {tuple(direction.shape)} fits neither the trailing dims of "
            f"{tuple(tensor.shape)} at {where} nor (k, *those); pass one shaped like an example of the site"
        )
    u, sizes, _ = torch.linalg.svd(rows.to(device=tensor.device, dtype=torch.float64).T, full_matrices=False)
    basis = u[:, sizes > sizes.max() * 1e-10]  # (D, rank): an orthonormal basis of the span, nothing more
    flat = tensor.reshape(*tensor.shape[: tensor.dim() - trailing], -1)  # (..., D)
    along = (flat.double() @ basis) @ basis.T
    projected: Tensor = (flat - along.to(tensor.dtype)).reshape(tensor.shape)
    return projected
