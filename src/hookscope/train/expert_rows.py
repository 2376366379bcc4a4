"""A watch's rows per expert of fused mixture-of-experts layers, and their routing: ``ExpertRows``.

A fused experts module (``hookscope.core.experts``: Qwen3-MoE, Mixtral, gpt-oss in transformers 5)
holds every expert in one ``(experts, ...)`` parameter, so the watch's site for it has one gradient
norm for all of them. ``ExpertRows`` adds a row per expert, named ``<experts>.<e>`` (type
``Expert``), whose ``grad_norm``, ``weight_norm`` and ``update_ratio`` are those of the expert's
slice ``[e]`` of each of the module's parameters (its activation columns are NaN: the experts'
outputs are inside one call), and at each logged step the routing of the step's training forward
passes as scalars: ``<experts>/tokens_cv``, ``<experts>/balance_loss`` (``core.experts.RouterStats``)
and ``<experts>/tokens.<e>``. Under torchrun these are each rank's own, not merged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..core.compiled import named_modules
from ..core.experts import EXPERT, expert_count, fused_experts, fused_note, prob_sums, router_of, router_stats, tally
from ..core.hooks import HandleGroup
from ..core.phase import call_phase
from ..store.history import COLUMNS

FUSED_NOTE = (  # what watch warns of a model with fused experts
    "hold fused expert parameters, which module hooks see as one tensor for all experts; watch adds a row per "
    "expert ('<experts>.<e>': the gradient, weight and update of its slice) and the routing of each logged step "
    "as scalars ('<experts>/tokens_cv', '<experts>/balance_loss', '<experts>/tokens.<e>')"
)


class ExpertRows:
    """The per-expert rows and routing scalars of the fused experts modules among a watch's ``sites``.

    Args:
        model: the watched model (where the routers beside the experts are looked for).
        sites: the watch's ``(name, module)`` pairs.
    """

    def __init__(self, model: nn.Module, sites: list[tuple[str, nn.Module]]) -> None:
        named = named_modules(model)
        modules = dict(named)
        self.units: dict[str, tuple[nn.Module, int, nn.Module | None]] = {}
        for name, module in fused_experts(sites):
            router = router_of(named, name)
            self.units[name] = (module, expert_count(module) or 0, None if router is None else modules[router])
        self.names = {f"{name}.{e}": name for name, (_, count, _) in self.units.items() for e in range(count)}
        self.type = EXPERT
        self.note = fused_note(sites)
        self._hooks = HandleGroup()
        self._sums: dict[str, dict[str, Tensor]] = {}  # unit -> grad_sq, delta_sq, before_sq: (experts,)
        self._route: dict[str, list[Any]] = {}  # unit -> [tokens, weight sums, prob sums, routed tokens]

    def arm(self) -> None:
        """Hooks on each experts module and its router for the logged step about to run."""
        self._sums, self._route = {}, {}
        for name, (module, count, router) in self.units.items():
            self._route[name] = [torch.zeros(count, dtype=torch.float64), torch.zeros(count, dtype=torch.float64),
                                 torch.zeros(count, dtype=torch.float64), 0]  # fmt: skip
            self._hooks.on_forward(module, self._tally_hook(name, count), always_call=False)
            if router is not None:
                self._hooks.on_forward(router, self._router_hook(name), always_call=False)

    def disarm(self) -> None:
        """Remove the step's hooks."""
        self._hooks.remove()

    def _tally_hook(self, name: str, count: int) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            counted = torch.is_grad_enabled() and call_phase().carries_grad  # a training pass, not a rerun
            if counted and len(args) >= 3:  # called as experts(hidden, top_k_index, top_k_weights)
                tokens, weights = tally(args[1], args[2], count)
                self._route[name][0] += tokens
                self._route[name][1] += weights

        return hook

    def _router_hook(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            logits = output[0] if isinstance(output, (tuple, list)) else output
            if torch.is_grad_enabled() and call_phase().carries_grad and isinstance(logits, Tensor):
                self._route[name][2] += prob_sums(logits)
                self._route[name][3] += logits.reshape(-1, logits.shape[-1]).shape[0]

        return hook

    def grads(self) -> None:
        """Each expert's squared gradient norm, read once per logged step (before the optimizer step)."""
        for name, (module, _, _) in self.units.items():
            sums = self._sums.setdefault(name, {})
            grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
            if "grad_sq" not in sums and grads:
                sums["grad_sq"] = sum(_per_expert(g.detach()) for g in grads)  # type: ignore[assignment]

    def updates(self, before: Mapping[int, Tensor]) -> None:
        """Each expert's squared update and weights before it, from the watch's copies ``before`` (by ``id``)."""
        for name, (module, _, _) in self.units.items():
            sums = self._sums.setdefault(name, {})
            for p in module.parameters(recurse=False):
                old = before.get(id(p))
                if old is not None:
                    for key, value in (("delta_sq", _per_expert(p.detach() - old)), ("before_sq", _per_expert(old))):
                        sums[key] = sums[key] + value if key in sums else value

    def rows(self, step: int) -> dict[str, list[float]]:
        """Each expert's row of ``COLUMNS`` for ``step`` (NaN where not measured)."""
        self.grads()
        found: dict[str, list[float]] = {}
        for name, (module, count, _) in self.units.items():
            sums = self._sums.get(name, {})
            weight_sq = sum(_per_expert(p.detach()) for p in module.parameters(recurse=False))
            for e in range(count):
                row = dict.fromkeys(COLUMNS, math.nan)
                row["step"], row["weight_norm"] = float(step), math.sqrt(float(weight_sq[e]))  # type: ignore[index]
                if "grad_sq" in sums:
                    row["grad_norm"] = math.sqrt(float(sums["grad_sq"][e]))
                if "delta_sq" in sums and float(sums["before_sq"][e]) > 0:
                    row["update_ratio"] = math.sqrt(float(sums["delta_sq"][e]) / float(sums["before_sq"][e]))
                found[f"{name}.{e}"] = [row[c] for c in COLUMNS]
        return found

    def scalars(self) -> dict[str, float]:
        """The routing of the logged step's training passes, per experts module (see the module docstring)."""
        found: dict[str, float] = {}
        for name, (tokens, weights, probs, routed) in self._route.items():
            if not float(tokens.sum()):
                continue
            total = routed or int(tokens.sum())
            stats = router_stats(tokens, total, weights, probs if routed else None)
            found[f"{name}/tokens_cv"] = stats.cv
            if routed:
                found[f"{name}/balance_loss"] = stats.aux_loss
            found.update({f"{name}/tokens.{e}": float(t) for e, t in enumerate(tokens)})
        return found


def _per_expert(t: Tensor) -> Tensor:
    """``(experts,)`` float64 on the CPU: the squared norm of each expert's slice ``t[e]``."""
    return t.double().square().reshape(t.shape[0], -1).sum(1).cpu()
