"""This process among its ranks: the one place hookscope asks torch.distributed (or torchrun) who it is.

::

    world = World.current()            # the running process group, else a world of one
    world = World.current(environment=True)   # ... else torchrun's RANK / WORLD_SIZE (no group needed)
    world = World.join(device)         # the running group, or one started from torchrun's environment
    world.rank, world.size; world.barrier(); world.gather(table)

A group hookscope starts (``join``) stays up until the process exits (then ``atexit`` destroys it):
destroying it and starting another in the same job can read the old group's addresses from
torchrun's store and fail to connect.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

W = TypeVar("W", bound="World")


@dataclass(frozen=True)
class World:
    """This process's ``rank`` among ``size`` ranks (a world of one outside torchrun)."""

    rank: int = 0
    size: int = 1

    @classmethod
    def current(cls: type[W], *, environment: bool = False) -> W:
        """The running process group's rank and size; without one, a world of one, or with ``environment``
        torchrun's ``RANK`` and ``WORLD_SIZE`` (a DataLoader worker, a process that has not joined yet)."""
        if joined():
            return cls(dist.get_rank(), dist.get_world_size())
        if environment:
            return cls(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))
        return cls()

    @classmethod
    def join(cls: type[W], device: torch.device) -> W:
        """The running process group, or one started from torchrun's environment (nccl on CUDA, else gloo),
        or a world of one."""
        if joined():
            return cls.current()
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size <= 1 or not dist.is_available():
            return cls()
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        atexit.register(_destroy)
        return cls.current()

    def barrier(self) -> None:
        """Wait for every rank (nothing to wait for in a world of one)."""
        if self.size > 1:
            dist.barrier()

    def gather(self, table: Tensor) -> list[Tensor]:
        """Every rank's ``table`` (the same shape on each), in rank order: one ``all_gather``."""
        if self.size == 1:
            return [table]
        tables = [torch.empty_like(table) for _ in range(self.size)]
        dist.all_gather(tables, table.contiguous())
        return tables


def joined() -> bool:
    """Whether this process is in a running torch.distributed process group."""
    return dist.is_available() and dist.is_initialized()


def _destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
