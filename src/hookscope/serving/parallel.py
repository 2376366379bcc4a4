"""Tensor parallel inside vLLM: which values each rank holds a piece of, and how hookscope makes them whole.

With ``tensor_parallel_size=N`` every worker (rank) runs every layer on its piece of the weights.
A column-parallel Linear's output is split along its last dimension: ``QKVParallelLinear`` holds its
rank's query heads, then its key and value heads (a KV head shared by ``r`` ranks when there are
fewer KV heads than ranks), ``MergedColumnParallelLinear`` (``gate_up_proj``) its piece of each
merged output, ``ColumnParallelLinear`` one piece. A ``RowParallelLinear`` takes such a piece as its
input (``input_is_parallel``) and all-reduces its output, so everything after it (a decoder layer's
pair, the norms) is replicated: each rank holds the whole value.

``Ranks.whole`` gathers a split value from every rank (``torch.distributed.all_gather`` on vLLM's
CPU group) and puts it together in the order of the unsplit model (``joined``: all query heads,
then the keys, then the values), so a record at ``N`` ranks is the record at one. Any other value
is taken as replicated: on its first call it is gathered once and every rank's copy must agree with
rank 0's (``disagreement``), or the step's requests fail with ``ServingError`` naming the site.
Every rank runs the same hooks on the same steps, so the collectives line up.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import ServingError

Piece = tuple[int, int]  # (its columns on one rank, the rank step: 1, or the ranks that share a KV head)
GATHERED = ("QKVParallelLinear", "MergedColumnParallelLinear", "ColumnParallelLinear", "RowParallelLinear")

# Replicated values are computed by every rank from the same all-reduced sums with the same kernels;
# only the order of the all-reduce's float32 additions may differ by rank: a few ulps of the summed
# magnitude. 1e-5 relative (about 80 float32 ulps) allows that and refuses any real difference.
REPLICATED_TOLERANCE = 1e-5


def layout(module: nn.Module, kind: str, ranks: int) -> list[Piece] | None:
    """How ``module``'s ``kind`` (``input`` or ``output``) is split over ``ranks`` ranks along its last
    dimension: one ``Piece`` per part of the unsplit tensor; None when every rank holds it whole.

    Args:
        module: a module of a tensor-parallel worker's model.
        kind: ``input`` or ``output``.
        ranks: the tensor-parallel size.

    Returns:
        The pieces, in the unsplit tensor's order, or None (replicated, or a module of another type).
    """
    name, linear = type(module).__name__, _untyped(module)
    if ranks < 2 or name not in GATHERED:
        return None
    if name == "RowParallelLinear":
        parallel = kind == "input" and bool(getattr(module, "input_is_parallel", False))
        return [(int(linear.input_size_per_partition), 1)] if parallel else None
    if kind != "output" or getattr(module, "gather_output", False):
        return None
    if name == "QKVParallelLinear":
        head, value_head = int(linear.head_size), int(linear.v_head_size)
        heads, kv_heads = int(linear.num_heads), int(linear.num_kv_heads)
        shared = int(linear.num_kv_head_replicas)
        return [(heads * head, 1), (kv_heads * head, shared), (kv_heads * value_head, shared)]
    if name == "MergedColumnParallelLinear":
        return [(int(size) // ranks, 1) for size in linear.output_sizes]
    return [(int(linear.output_size_per_partition), 1)]


def joined(shards: Sequence[Tensor], pieces: Sequence[Piece]) -> Tensor:
    """The unsplit tensor from every rank's shard (rank order): each piece's columns of ranks ``0, step,
    2 step...`` side by side, piece after piece.

    Args:
        shards: rank ``r``'s tensor at ``shards[r]``, the pieces side by side along the last dimension.
        pieces: ``layout``'s pieces.

    Returns:
        The whole tensor, its last dimension the unsplit model's.
    """
    parts, start = [], 0
    for width, step in pieces:
        parts += [shard[..., start : start + width] for shard in shards[::step]]
        start += width
    return torch.cat(parts, dim=-1)


def disagreement(copies: Sequence[Tensor]) -> float:
    """The largest difference of any rank's copy from rank 0's, relative to rank 0's largest magnitude.

    Args:
        copies: every rank's copy of one value, rank order.

    Returns:
        ``max |copy - copies[0]| / max(max |copies[0]|, 1e-30)`` over the ranks (0.0 when they agree).
    """
    first = copies[0].double()
    scale = max(float(first.abs().max()) if first.numel() else 0.0, 1e-30)
    return max((float((c.double() - first).abs().max()) / scale for c in copies[1:] if c.numel()), default=0.0)


class Ranks:
    """This worker's tensor-parallel group: ``whole`` makes a split value whole and checks a replicated one once.

    Args:
        size: the tensor-parallel size.
        rank: this worker's rank in it.
        group: the process group to gather on (vLLM's CPU group).
    """

    def __init__(self, size: int, rank: int, group: Any) -> None:
        self.size, self.rank, self.group = size, rank, group
        self.checked: set[tuple[str, str, str]] = set()  # (site, kind, key) whose copies were compared
        self.largest = 0.0  # the largest disagreement of a replicated value seen (relative)

    def whole(
        self, site: str, module: nn.Module, kind: str, leaves: list[tuple[str, Tensor]]
    ) -> list[tuple[str, Tensor]]:
        """``leaves`` of ``site``'s ``kind`` as the unsplit model has them (gathered from every rank).

        Args:
            site: the module's name.
            module: the module.
            kind: ``input`` or ``output``.
            leaves: ``(key, tensor)`` of this rank, every rank calling with the same keys and shapes.

        Returns:
            The leaves, a split one gathered whole, a replicated one this rank's copy.

        Raises:
            ServingError: on its first call a replicated value whose copies differ between ranks.
        """
        pieces = layout(module, kind, self.size)
        found = []
        for key, tensor in leaves:
            if pieces is not None and tensor.shape[-1] == sum(width for width, _ in pieces):
                found.append((key, joined(self.gathered(tensor), pieces)))
                continue
            if (site, kind, key) not in self.checked:
                self.checked.add((site, kind, key))
                off = disagreement(self.gathered(tensor))
                self.largest = max(self.largest, off)
                if off > REPLICATED_TOLERANCE:
                    raise ServingError(
                        f"{site!r} {kind} {key} differs between tensor-parallel ranks by {off:.2g} (relative, more "
                        f"than {REPLICATED_TOLERANCE:g}): each rank holds its own piece of it, which hookscope "
                        f"cannot put together; it gathers {', '.join(GATHERED[:3])} outputs and RowParallelLinear "
                        "inputs, and takes a decoder layer's output (replicated) whole"
                    )
            found.append((key, tensor))
        return found

    def gathered(self, tensor: Tensor) -> list[Tensor]:
        """Every rank's ``tensor``, rank order (a collective: every rank calls it).

        Args:
            tensor: this rank's tensor, of the same shape on every rank.

        Returns:
            ``size`` tensors.
        """
        local = tensor.detach().contiguous()
        copies = [torch.empty_like(local) for _ in range(self.size)]
        torch.distributed.all_gather(copies, local, group=self.group)
        return copies


def ranks() -> Ranks | None:
    """This worker's tensor-parallel group, or None at one rank (or outside vLLM's distributed setup).

    Returns:
        A ``Ranks`` when the tensor-parallel size is above 1.
    """
    try:
        state = importlib.import_module("vllm.distributed.parallel_state")
        group = state.get_tp_group()
    except Exception:  # no tensor-parallel group (a bare worker, a test without vLLM)
        return None
    return Ranks(int(group.world_size), int(group.rank_in_group), group.cpu_group) if group.world_size > 1 else None


def checked(group: Ranks | None) -> dict[str, Any]:
    """What a worker's first-call checks found: ``disagreement`` (the largest, relative) and ``replicated``
    (``"site kind key"`` of each value compared across ranks); nothing checked at one rank.

    Args:
        group: the worker's ``Ranks``, or None at one rank.

    Returns:
        ``{"disagreement": float, "replicated": [str, ...]}``.
    """
    if group is None:
        return {"disagreement": 0.0, "replicated": []}
    return {"disagreement": group.largest, "replicated": sorted(" ".join(c) for c in group.checked)}


def merged(found: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the block's ranks found (``worker.finish``, rank order) as one: rank 0's (it holds the records,
    whole), with every request that failed on any rank failed.

    Args:
        found: each rank's ``finish`` result.

    Returns:
        Rank 0's, its ``errors`` joined with the other ranks'.
    """
    first = found[0]
    for other in found[1:]:
        for request, why in other.get("errors", {}).items():
            first.setdefault("errors", {}).setdefault(request, why)
    return first


def _untyped(module: nn.Module) -> Any:
    """``module`` as ``Any``: vLLM's Linear layers keep their split sizes as plain attributes."""
    return module
