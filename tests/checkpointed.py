"""A small network whose middle block runs under activation checkpointing, in every way torch offers.

``Net(how)``: ``stem`` (Linear, outside any checkpoint) -> ``body`` -> ``head`` (Linear). ``body``
calls one Linear (``mix``) and one Tanh (``act``) twice each, so a site has several logical calls.
``how`` is ``None`` (no checkpoint: the oracle), ``"non-reentrant"`` / ``"reentrant"``
(``torch.utils.checkpoint`` with that ``use_reentrant``) or ``"wrapper"`` (``checkpoint_wrapper``,
whose wrapped module is renamed ``body._checkpoint_wrapped_module``; ``plain`` gives the unwrapped
name). Built seeded, float64: every ``how`` gets the same weights.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import checkpoint

HOWS = ("non-reentrant", "reentrant", "wrapper")
SITES = ("stem", "body.mix", "body.act", "head")


class Body(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Linear(8, 8)
        self.act = nn.Tanh()

    def forward(self, h: Tensor) -> Tensor:
        return self.act(self.mix(self.act(self.mix(h))))


class Net(nn.Module):
    def __init__(self, how: str | None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.how = how
        self.stem = nn.Linear(6, 8)
        self.body: nn.Module = checkpoint_wrapper(Body()) if how == "wrapper" else Body()
        self.head = nn.Linear(8, 3)
        self.double()

    def forward(self, x: Tensor) -> Tensor:
        h = self.stem(x).tanh()
        if self.how in ("non-reentrant", "reentrant"):
            h = checkpoint(self.body, h, use_reentrant=self.how == "reentrant")
        else:
            h = self.body(h)
        return self.head(h)


def plain(name: str) -> str:
    """The site's name in the unwrapped network."""
    return name.replace("._checkpoint_wrapped_module", "")


def sites(net: Net) -> list[str]:
    """The names of ``SITES`` in ``net`` (a wrapper renames the body's modules)."""
    names = {plain(name): name for name, _ in net.named_modules()}
    return [names[site] for site in SITES]


def batch() -> Tensor:
    return torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
