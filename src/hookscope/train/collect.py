"""What one logged step gathers of one site, on the device, until the step ends: ``Gathered``.

``watch`` keeps a ``Gathered`` per site while a logged step runs. Forward calls add their
activation sums and units' alive mask, gradient hooks the squares of the output gradient, the
optimizer hooks the parameter gradients and the update; ``values`` lays it all out as one float64
vector (NaN where nothing was measured), so that every site of the step travels to the host in
one transfer; there ``host_row`` turns a site's vector into its row of statistics, and ``undefined``
names the statistics that have no value: the update ratio of weights whose norm was zero before the
step (a zero-initialised layer, PEFT's ``lora_B``): NaN in the row, marked undefined, never an alert.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..core.placement import local
from ..stats.norms import square_sum
from .measures import ACT, F64, activation_moments, activation_row, combine

SLOTS = (*ACT, "grad_output_sq", "grad_sq", "weight_sq", "delta_sq",
         "before_sq", "dead")  # fmt: skip


@dataclass
class Gathered:
    """One site's sums over a logged step (tensors on the model's device)."""

    act: Tensor | None = None  # (5,) activation_moments, combined over calls
    alive: Tensor | None = None  # (units,) bool, OR over calls
    grad_output_sq: Tensor | None = None
    grad_sq: Tensor | None = None
    delta_sq: Tensor | None = None
    before_sq: Tensor | None = None
    last_output: Tensor | None = None  # for TensorBoard's histograms only
    last_grad_output: Tensor | None = None
    grads: dict[str, Tensor] = field(default_factory=dict)  # parameter gradients, for histograms

    def add_output(self, x: Tensor, dim: int, *, keep: bool) -> None:
        moments, alive = activation_moments(x, dim)
        self.act = moments if self.act is None else combine(self.act, moments)
        if self.alive is None or self.alive.shape != alive.shape:  # a shape change starts the mask again
            self.alive = alive
        else:
            self.alive = self.alive | alive
        if keep:
            self.last_output = x.detach().clone()

    def add_grad_output(self, grad: Tensor, *, keep: bool) -> None:
        part = square_sum(local(grad))  # a DTensor's piece: ``train.ranks`` adds the ranks' sums
        self.grad_output_sq = part if self.grad_output_sq is None else self.grad_output_sq + part
        if keep:
            self.last_grad_output = grad.detach().clone()

    @property
    def measured(self) -> bool:
        return any(t is not None for t in (self.act, self.grad_output_sq, self.grad_sq, self.delta_sq))

    def values(self, weight_sq: Tensor | None, dead: Tensor | None, device: torch.device) -> Tensor:
        """``(len(SLOTS),)`` float64 on ``device``: the sums in ``SLOTS`` order, NaN where not measured."""
        nan = torch.full((), math.nan, dtype=F64, device=device)
        act = list(self.act.to(device).unbind()) if self.act is not None else [nan] * 5
        rest = (self.grad_output_sq, self.grad_sq, weight_sq, self.delta_sq, self.before_sq, dead)
        return torch.stack(act + [nan if t is None else t.to(device, F64) for t in rest])


def host_row(step: int, slots: list[float]) -> dict[str, float]:
    """A row of ``COLUMNS`` from a site's ``SLOTS`` on the host."""
    s = dict(zip(SLOTS, slots, strict=True))
    mean, std, abs_mean, zeros = activation_row([s[k] for k in ACT])
    ratio = math.sqrt(s["delta_sq"]) / math.sqrt(s["before_sq"]) if s["before_sq"] > 0 else math.nan
    if math.isnan(s["delta_sq"]) or not math.isfinite(s["before_sq"]):
        ratio = math.nan if math.isnan(s["before_sq"]) and math.isnan(s["delta_sq"]) else math.inf
    return {"step": float(step), "act_mean": mean, "act_std": std, "act_abs_mean": abs_mean, "zeros": zeros,
            "dead": s["dead"], "grad_output_norm": math.sqrt(s["grad_output_sq"]), "grad_norm": math.sqrt(s["grad_sq"]),
            "weight_norm": math.sqrt(s["weight_sq"]), "update_ratio": ratio}  # fmt: skip


def undefined(slots: list[float]) -> set[str]:
    """The columns of a site's row that are undefined, not faulty: ``update_ratio`` when the weights before the
    step had norm zero and the update is finite (|dw| / 0); an update holding NaN or inf is a fault."""
    s = dict(zip(SLOTS, slots, strict=True))
    return {"update_ratio"} if s["before_sq"] == 0 and math.isfinite(s["delta_sq"]) else set()


def measured(g: Gathered, has_params: bool) -> set[str]:
    """The columns a site's row holds numbers for (the others are NaN because nothing was measured)."""
    found = {"act_mean", "act_std", "act_abs_mean", "zeros", "dead"} if g.act is not None else set()
    pairs = (("grad_output_norm", g.grad_output_sq), ("grad_norm", g.grad_sq), ("update_ratio", g.delta_sq))
    return found | {c for c, t in pairs if t is not None} | ({"weight_norm"} if has_params else set())
