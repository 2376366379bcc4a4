"""Every rank stops at the same step: ``nan_guard``'s findings agreed on across ranks under torchrun.

A rank that raised alone would leave the others waiting in their next collective (DDP's gradient
all-reduce, FSDP2's all-gather) until the process group times out. So under torchrun the guard
does not raise where it finds a NaN: it holds the finding (``hold``) and lets the rank run on to
the step's check points, the optimizer's step pre-hook and post-hook and the end of the block,
where ``agree`` all-reduces one flag (a single integer, every step: the whole cost when nothing
is wrong). When any rank holds a finding, the ranks exchange them (``all_gather_object``, once)
and every rank raises the same ``NonFiniteError``: the first finding, by step, then phase
(forward, backward, optimizer), then rank; its message names the rank and what the other ranks
found. A step that made NaN is not applied: the pre-hook's check runs before ``optimizer.step()``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..base.world import World
from ..errors import NonFiniteError

PHASES = ("forward", "backward", "optimizer")


class Lockstep:
    """The held finding of this rank (``rank`` of ``size``); a world of one raises at once.

    ``stepped``: whether the guard has optimizers. Without one there is no step at which every rank
    is sure to arrive (a guard may be open on one rank only, for an evaluation): it raises at once.
    """

    def __init__(self, *, stepped: bool) -> None:
        world = World.current() if stepped else World()
        self.rank, self.size = world.rank, world.size
        self.held: NonFiniteError | None = None

    def hold(self, err: NonFiniteError) -> bool:
        """Keep ``err`` until the ranks agree; False in a world of one (raise it now)."""
        if self.size == 1:
            return False
        err.rank = self.rank
        if self.held is None:
            self.held = err
        return True

    def agree(self) -> NonFiniteError | None:
        """The finding every rank raises now, or None when no rank holds one (one tiny all-reduce)."""
        if self.size == 1:
            return None
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
        flag = torch.tensor([0 if self.held is None else 1], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if not int(flag.item()):
            return None
        found: list[NonFiniteError | None] = [None] * self.size
        dist.all_gather_object(found, self.held)
        self.held = None
        return first([f for f in found if f is not None], self.size)


def first(found: list[NonFiniteError], size: int) -> NonFiniteError:
    """The first of the ranks' findings, its message naming its rank and the others' findings."""
    found = sorted(found, key=lambda f: (f.step, PHASES.index(f.phase) if f.phase in PHASES else 3, f.rank or 0))
    chosen = found[0]
    others = "".join(f"; rank {f.rank} found: {f}" for f in found[1:])
    message = f"rank {chosen.rank} of {size}: {chosen}{others} (every rank stops at this step)"
    return NonFiniteError(
        message, step=chosen.step, phase=chosen.phase, module=chosen.module, call=chosen.call, kind=chosen.kind,
        key=chosen.key, value=chosen.value, count=chosen.count, numel=chosen.numel,
        input_absmax=chosen.input_absmax, rank=chosen.rank,
    )  # fmt: skip
