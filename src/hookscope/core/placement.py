"""Where a tensor lives across ranks: DTensor shards and replicas, read without gathering them.

Under FSDP2 (``fully_shard``) and tensor parallelism (``parallelize_module``) parameters, their
gradients and some activations are ``DTensor``s: each rank holds a local piece (``to_local()``)
of a global tensor laid out on a device mesh by ``placements`` (``Shard(d)``: cut along dim
``d`` across that mesh dimension; ``Replicate()``: the same values on every rank of it;
``Partial()``: a pending sum). A DTensor's elementwise reductions (``.tolist()``, ``.view(-1)``)
either fail or start a collective on one rank only, which hangs the others; so hookscope reduces
the local piece and adds the ranks' partial sums with one collective of its own.

``replicas(t, world)`` says how many of the ``world`` ranks hold each element of ``t``: a sum of
each rank's local ``share`` divided by it, added over the ranks, is the global sum whether ``t``
is sharded (FSDP2's ``Shard(0)``: 1), replicated (DDP's parameters and gradients, a TP
``Replicate()`` bias: ``world``) or both on a 2-D mesh.

DeepSpeed ZeRO-3 hides its parameters (``numel() == 0`` with ``ds_`` attributes) where no hook
can read them: ``refuse_zero3`` refuses such a model.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from torch import Tensor, nn

from ..base.world import World
from ..errors import OptionError


def dtensor_type() -> type | None:
    """``torch.distributed.tensor.DTensor`` once something imported it (no DTensor exists before), else None.

    Never imported here: ``torch.distributed.tensor`` costs tens of MiB of memory and a second of import
    time that a process without DTensors would pay on its first capture.
    """
    module = sys.modules.get("torch.distributed.tensor")
    kind = getattr(module, "DTensor", None)
    return kind if isinstance(kind, type) else None


def this_rank() -> int:
    """This process's rank under torchrun (0 without a process group)."""
    return World.current().rank


def is_dtensor(t: object) -> bool:
    kind = dtensor_type()
    return kind is not None and isinstance(t, kind)


def local(t: Tensor) -> Tensor:
    """This rank's piece of ``t`` (a DTensor's ``to_local()``; any other tensor itself), detached.

    A ``Partial`` placement (a sum still pending) is summed first: a collective that every rank
    holding the tensor runs at the same point, as each rank's hooks see the same tensors.
    """
    if not is_dtensor(t):
        return t.detach()
    placements = t.placements  # type: ignore[attr-defined]
    if any(p.is_partial() for p in placements):
        from torch.distributed.tensor import Replicate

        kept = [Replicate() if p.is_partial() else p for p in placements]
        t = t.redistribute(placements=kept)  # type: ignore[attr-defined]
    piece: Tensor = t.to_local()  # type: ignore[attr-defined]
    return piece.detach()


def replicas(t: Tensor, world: int) -> int:
    """How many of the ``world`` ranks hold each element of ``t``: ``world`` for a plain tensor (a
    data-parallel replica), ``world`` over the number of shards for a DTensor."""
    if not is_dtensor(t):
        return world
    mesh, placements = t.device_mesh, t.placements  # type: ignore[attr-defined]
    shards = math.prod(mesh.size(d) for d, p in enumerate(placements) if p.is_shard() or p.is_partial())
    return max(world // int(shards), 1)


def describe(t: Tensor) -> str:
    """``"DTensor (Shard(dim=0),) on a mesh of (2,), local (4, 8) of (4, 16)"``, or the shape of a plain tensor."""
    if not is_dtensor(t):
        return f"tensor {tuple(t.shape)}"
    mesh, placements = t.device_mesh, t.placements  # type: ignore[attr-defined]
    piece = t.to_local()  # type: ignore[attr-defined]
    return (
        f"DTensor {tuple(placements)} on a mesh of {tuple(mesh.shape)}, local {tuple(piece.shape)} of {tuple(t.shape)}"
    )


def tensor_parallel(module: nn.Module) -> Tensor | None:
    """The DTensor weight of a tensor-parallel module whose outputs are cut across ranks, or None: a
    column-parallel Linear's weight is ``Shard(0)`` (an Embedding's ``Shard(1)``), and its output on
    each rank is a local piece; a row-parallel one's (``Shard(1)``) output is whole once all-reduced.

    An FSDP2 module (``fully_shard``) holds ``Shard`` DTensors too, but gathers them for its forward
    pass: its output is whole on each rank's batch, so it is not a tensor-parallel shard.
    """
    if _fsdp(module):
        return None
    weight = getattr(module, "weight", None)
    cut = 1 if isinstance(module, nn.Embedding) else 0  # the weight's dim that indexes the outputs
    if isinstance(weight, Tensor) and is_dtensor(weight) and any(p.is_shard(cut) for p in weight.placements):  # type: ignore[attr-defined]
        return weight
    return None


def shard_note(name: str, module: nn.Module, output: Tensor | None, rank: int) -> str | None:
    """What a hook sees of a tensor-parallel shard's output, and how to gather it; None for any other module."""
    weight = tensor_parallel(module)
    if weight is None:
        return None
    seen = f"a {describe(output)}, this rank's piece" if output is not None else "this rank's piece"
    return (
        f"{name!r} is a tensor-parallel shard (its weight is a {describe(weight)}): its output on rank {rank} is "
        f"{seen}; to see the whole activation, have parallelize_module return DTensors "
        "(ColwiseParallel(use_local_output=False)) and gather one with .full_tensor()"
    )


def shard_notes(model: nn.Module | None, sites: list[tuple[str, nn.Module]], rank: int) -> list[str]:
    """``shard_note`` of every tensor-parallel site, before any call (none under FSDP2, whose weights
    are ``Shard(0)`` DTensors between its passes but whole in them)."""
    if model is None or any(_fsdp(m) for m in model.modules()):
        return []
    return [note for name, module in sites if (note := shard_note(name, module, None, rank))]


def _fsdp(module: nn.Module) -> bool:
    """An FSDP2 module; ``torch.distributed.fsdp`` is never imported here (no module is one before it is)."""
    kind = getattr(sys.modules.get("torch.distributed.fsdp"), "FSDPModule", None)
    return isinstance(kind, type) and isinstance(module, kind)


def refuse_zero3(model: nn.Module, caller: str) -> None:
    """Raise ``OptionError`` for a DeepSpeed ZeRO-3 model: its parameters are empty outside its own gathers."""
    hidden = next((n for n, p in model.named_parameters() if p.numel() == 0 and _deepspeed(p)), None)
    if hidden is not None:
        raise OptionError(
            f"{caller} cannot read DeepSpeed ZeRO-3 parameters: {hidden!r} is partitioned away (numel() == 0, "
            "ds_ attributes); use ZeRO stage 1 or 2, or PyTorch FSDP2 (fully_shard), whose shards hookscope reads"
        )


def _deepspeed(p: Any) -> bool:
    return any(name.startswith("ds_") for name in vars(p))
