"""What a watch reads around an optimizer step: the parameter gradients it steps with, and its update.

``OptimizerReads(sites)`` knows which watched site owns each parameter (``sites.owned_params``: each
once). On a logged step, ``keep_weights(optimizer)`` copies the weights an optimizer is about to
change (its pre-step hook), ``grads(...)`` adds each site's squared gradient norm (as the optimizer
sees it, after accumulation; unscaled when given the GradScaler's scale of a fused optimizer), and
``updates(...)`` adds the squared norms of the update and of the weights before it, from which the
update ratio |Δw| / |w| follows. Sums go through ``Ranks.share`` (``train.ranks``): each rank's share
of a DTensor's sum.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from .collect import Gathered
from .rank_sums import Ranks
from .sites import owned_params


class OptimizerReads:
    """The parameters of ``sites`` (name, module), and the weights kept before an optimizer step."""

    def __init__(self, sites: list[tuple[str, nn.Module]]) -> None:
        self.modules = dict(sites)
        self.owned = owned_params(sites)  # site -> its (name, parameter) pairs
        self.owner = {id(p): site for site, pairs in self.owned.items() for _, p in pairs}
        self.before: dict[int, Tensor] = {}  # parameter id -> its value before the optimizer step

    def keep_weights(self, optimizer: Optimizer) -> None:
        """Copy the watched weights ``optimizer`` is about to step."""
        for p in _params(optimizer):
            if id(p) in self.owner:
                self.before[id(p)] = p.detach().clone()

    def updates(self, optimizer: Optimizer, gathered: dict[str, Gathered], ranks: Ranks) -> None:
        """Add each site's squared update and weight norms across ``optimizer``'s step."""
        by_site: dict[str, tuple[list[Tensor], list[Tensor]]] = {}  # site -> (weights after, weights before)
        for p in _params(optimizer):
            before, site = self.before.pop(id(p), None), self.owner.get(id(p))
            if before is not None and site is not None:
                after, weights = by_site.setdefault(site, ([], []))
                after.append(p.detach())
                weights.append(before)
        for site, (after, weights) in by_site.items():
            g = gathered[site]
            old = ranks.share(weights)
            torch._foreach_sub_(weights, after)  # the copies become before - after = -update, in place: no new tensor
            delta = ranks.share(weights)  # (a - b is -(b - a) exactly in IEEE arithmetic: the same squares)
            assert delta is not None  # both lists hold a tensor
            assert old is not None
            g.delta_sq = delta if g.delta_sq is None else g.delta_sq + delta
            g.before_sq = old if g.before_sq is None else g.before_sq + old

    def grads(self, optimizer: Optimizer | None, gathered: dict[str, Gathered], ranks: Ranks, *,
              scale: Tensor | None = None, keep: bool = False) -> None:  # fmt: skip
        """Add the squared gradient norms of the sites ``optimizer`` steps, or (None) of those still without
        one; ``scale``: a fused optimizer's GradScaler scale, divided out; ``keep``: clones for histograms."""
        chosen = None if optimizer is None else {id(p) for p in _params(optimizer)}
        for site, g in gathered.items():
            if optimizer is None and g.grad_sq is not None:
                continue
            named = [(n, p) for n, p in self.named(site) if p.grad is not None and (chosen is None or id(p) in chosen)]
            part = ranks.share(p.grad for _, p in named if p.grad is not None)
            if part is None:
                continue
            part = part if scale is None else part / scale.to(part.device, part.dtype) ** 2
            g.grad_sq = part if g.grad_sq is None else g.grad_sq + part
            if keep:
                g.grads.update({n: p.grad.detach().clone() for n, p in named if p.grad is not None})

    def weight_sq(self, params: Sequence[Tensor], ranks: Ranks) -> Tensor | None:
        """This rank's share of the squared norm of the weights ``params`` (``Ranks.share``)."""
        return ranks.share(params)

    def named(self, site: str) -> list[tuple[str, Tensor]]:
        """The named parameters the site ``site`` owns (``sites.owned_params``)."""
        return list(self.owned[site])


def _params(optimizer: Optimizer) -> Iterator[Tensor]:
    return (p for group in optimizer.param_groups for p in group["params"])
