"""What ``steer_sweep`` measured: propensity per example and scale, its slope, the side effect, the tally.

The steerability of an example is the least-squares slope of its propensity over the scales
(steering-bench's per-example slope, Tan et al. 2024): positive when adding the vector moves the
example the way the vector says, negative (anti-steerable) when it moves it the other way. Their mean
is the steerability, their standard deviation the spread. ``kl`` is the side effect: the mean KL
divergence of the next-token distribution on neutral prompts, unsteered against steered, at each scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..base.display import Shows, plot_of, table_of

if TYPE_CHECKING:
    from PIL.Image import Image


def slopes(scales: Tensor, propensity: Tensor) -> Tensor:
    """The least-squares slope of each row of ``propensity`` (N, S) over ``scales`` (S,): (N,) float64."""
    s = scales.double() - scales.double().mean()  # (S,)
    p = propensity.double() - propensity.double().mean(dim=1, keepdim=True)  # (N, S)
    return (p @ s) / (s @ s)


@dataclass(frozen=True, eq=False)
class SteerSweep(Shows):
    """Propensity of each example at each scale, its slope, and the side effect on neutral prompts.

    Attributes:
        sites: the modules steered.
        scales: ``(S,)`` the scales the vector was multiplied by (0: the unsteered model, no edit).
        propensity: ``(N, S)`` float64, each example's propensity at each scale.
        kl: ``(S,)`` float64, the mean KL divergence (nats) on the neutral prompts, unsteered against
            steered; None when no neutral prompts were given.
        edited: per scale, the calls the edits changed, summed over the sites (the edit tally).
        forwards: per scale, the forward passes the model ran.
    """

    sites: tuple[str, ...]
    scales: Tensor
    propensity: Tensor
    kl: Tensor | None
    edited: tuple[int, ...]
    forwards: tuple[int, ...]

    def __repr__(self) -> str:
        return (
            f"<SteerSweep of {len(self.propensity)} examples over {len(self.scales)} scales at "
            f"{', '.join(self.sites)}: steerability {self.steerability:.4g} +- {self.spread:.4g}>"
        )

    @property
    def slopes(self) -> Tensor:
        """``(N,)`` float64: each example's least-squares slope of propensity over the scales."""
        return slopes(self.scales, self.propensity)

    @property
    def steerability(self) -> float:
        """The mean slope over the examples."""
        return float(self.slopes.mean())

    @property
    def spread(self) -> float:
        """The standard deviation of the slopes over the examples (0 for one example)."""
        found = self.slopes
        return float(found.std()) if len(found) > 1 else 0.0

    @property
    def anti_steerable(self) -> float:
        """The fraction of examples whose slope is negative."""
        return float((self.slopes < 0).double().mean())

    def table(self) -> str:
        """A row per scale: mean propensity and its spread, KL on the neutral prompts, calls edited of made.

        Returns:
            The text table, and below it the steerability, its spread and the anti-steerable examples.
        """
        return table_of(self)

    def plot(self) -> Image:
        """Propensity over the scales (each example, and the mean), the slopes' histogram, KL over the scales.

        Returns:
            The picture (PIL).
        """
        return plot_of(self)


def kl_divergence(before: Tensor, after: Tensor) -> Tensor:
    """KL(p || q) in nats of ``softmax(before)`` against ``softmax(after)`` over the last dim, per position."""
    p_log = torch.log_softmax(before.double(), dim=-1)
    q_log = torch.log_softmax(after.double(), dim=-1)
    return (p_log.exp() * (p_log - q_log)).sum(dim=-1)
