"""Mixture-of-experts layers whose experts are fused into 3-D parameters: the selector ``":experts"``.

In transformers 5 the experts of Qwen3-MoE, Mixtral, gpt-oss and their kin are one module holding
``(experts, out, in)`` parameters (``gate_up_proj``, ``down_proj``, their biases), called as
``experts(hidden_states, top_k_index, top_k_weights)`` with ``hidden_states`` ``(tokens, hidden)``
and both routing tensors ``(tokens, k)``; the router beside it (``gate``, ``router``) holds an
``(experts, hidden)`` weight and returns the router logits first. Module hooks see one call of the
experts module for all of its experts: what each expert did is inside that call.

``fused_experts(model)`` finds them (a module whose own parameters all start with the same
number of experts, one of them 3-D); ``router_of`` finds the router beside one. ``ExpertSites``
gives a capture whose selection holds ``":experts"`` one site per expert, named ``<experts>.<e>``
(as a ``ModuleList`` of experts would be): at each call of the experts module, the tokens routed to
expert ``e`` are run through it alone (the experts module's own forward with that one expert and
weight 1, without autograd), and its call keeps ``output`` keys ``out`` (the expert's output for
those tokens, before the routing weight), ``positions`` (the tokens' rows in the flattened
``(batch * sequence)`` input) and ``weight`` (their routing weights), and ``input`` key ``args[0]``
(the tokens' hidden states). So ``sum_e weight_e * out_e`` put back at ``positions`` is the experts
module's output. Selected by name, an experts module is one site, as any module. ``tally``,
``prob_sums`` and ``router_stats`` are the arithmetic of the router statistics (tokens per expert,
load balance).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from .call import Call
from .hooks import HandleGroup
from .inference import transform
from .kinds import Kind, forward_kinds
from .phase import call_phase
from .records import Record

EXPERTS = ":experts"
EXPERT = "Expert"  # the type of an expert's site
NO_EXPERT_GRADS = (
    "an expert's site is recomputed from the fused parameters without autograd, so it has no gradients; "
    "param_grad of the experts module, or hookscope.watch, gives one gradient norm per expert"
)
Keep = Callable[[list[tuple[str, Tensor]], str, Kind], dict[str, Tensor]]


def expert_count(module: nn.Module) -> int | None:
    """The number of experts of a fused experts module (its own parameters all ``(experts, ...)``, one of them
    3-D), else None."""
    own = list(module.parameters(recurse=False))
    if not any(p.dim() == 3 for p in own):
        return None
    counts = {p.shape[0] for p in own}
    return counts.pop() if len(counts) == 1 and min(p.dim() for p in own) >= 2 else None


def fused_experts(named: Sequence[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """The fused experts modules among ``named`` (``(name, module)`` pairs), in their order."""
    return [(name, m) for name, m in named if (expert_count(m) or 0) >= 2]


def router_of(named: Sequence[tuple[str, nn.Module]], experts: str) -> str | None:
    """The name of the router beside the experts module ``experts``: a sibling holding an ``(experts, hidden)``
    weight of its own; None when there is none."""
    modules = dict(named)
    count = expert_count(modules[experts])
    parent = experts.rpartition(".")[0]
    for name, module in named:
        sibling = name != experts and name.rpartition(".")[0] == parent
        if sibling and any(p.dim() == 2 and p.shape[0] == count for p in module.parameters(recurse=False)):
            return name
    return None


def expert_units(named: Sequence[tuple[str, nn.Module]]) -> list[str]:
    """What ``":experts"`` selects among ``named``: each fused experts module and the router beside it."""
    found: list[str] = []
    for name, _ in fused_experts(named):
        router = router_of(named, name)
        found += [name] if router is None else [router, name]
    return found


def fused_note(named: Sequence[tuple[str, nn.Module]]) -> str:
    """``'a.experts' (gate_up_proj (8, 64, 32), ...), ...``: the fused experts modules and their 3-D parameters."""
    parts = []
    for name, module in fused_experts(named):
        shapes = ", ".join(f"{p} {tuple(t.shape)}" for p, t in module.named_parameters(recurse=False) if t.dim() == 3)
        parts.append(f"{name!r} ({shapes})")
    return ", ".join(parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")


def asks_experts(select: object) -> bool:
    """``select`` holds ``":experts"`` or ``"<modules>:experts"`` (alone or in a list): a capture then keeps one
    site per expert."""
    if isinstance(select, (list, tuple)):
        return any(asks_experts(item) for item in select)
    return isinstance(select, str) and select.endswith(EXPERTS)


def left_out_note(model: nn.Module | None, select: object) -> str | None:
    """The warning for a capture of every leaf (``select`` None) of a model with fused experts modules, naming
    them and ``":experts"``; None when there are none."""
    if model is None or select is not None or not fused_experts(list(model.named_modules())):
        return None
    return (
        f"hookscope.capture: {fused_note(list(model.named_modules()))} hold fused expert parameters, which module "
        f"hooks see as one call for all experts, so select=None (every leaf) keeps no site per expert; select "
        f"{EXPERTS!r} for one site per expert (its tokens, its output and their routing weights) and the routers"
    )


def unwritten_note(modules: Sequence[tuple[str, nn.Module]], select: object) -> str | None:
    """What a store of ``select`` (``modules``) leaves out when it asks for ``":experts"``: the experts' sites."""
    if not asks_experts(select) or not fused_experts(modules):
        return None
    return (
        f"{fused_note(modules)} hold fused expert parameters; the store keeps their outputs and their routers', "
        "not one site per expert (each batch sends each expert a different number of tokens): "
        f"hookscope.capture(model, {EXPERTS!r}) gives those, and hookscope.routing(cap) their statistics"
    )


def split_by_expert(module: nn.Module, args: tuple[Any, ...], count: int) -> list[tuple[int, Tensor, Tensor, Tensor]]:
    """``(e, positions, out, weight)`` for each expert that got tokens in the call ``module(*args)``.

    ``positions`` ``(n,)`` are the rows of ``args[0]`` routed to ``e``, ``weight`` ``(n,)`` their routing
    weights, ``out`` ``(n, hidden)`` the expert's output for them before the weight: the module's own
    forward run with that one expert at weight 1, without autograd.
    """
    hidden, index, weights = args[0], args[1], args[2]
    found = []
    with torch.no_grad():
        for e in range(count):
            rows, slot = torch.where(index == e)
            if rows.numel() == 0:
                continue
            one = torch.full((rows.numel(), 1), e, dtype=index.dtype, device=index.device)
            unit = torch.ones((rows.numel(), 1), dtype=weights.dtype, device=weights.device)
            out = module.forward(hidden[rows], one, unit)
            found.append((e, rows, out, weights[rows, slot]))
    return found


class ExpertSites:
    """One site per expert of each fused experts module of a capture (see the module docstring).

    Args:
        modules: the capture's ``(name, module)`` pairs; its fused experts modules are split.
        kinds: the capture's kinds; ``output`` and ``input`` are kept per expert, gradients are not.
    """

    def __init__(self, modules: Sequence[tuple[str, nn.Module]], kinds: tuple[Kind, ...]) -> None:
        self.kinds = kinds
        self.units = {name: (m, expert_count(m) or 0) for name, m in fused_experts(modules)}
        self.records: dict[str, Record] = {}
        for name, (_, count) in self.units.items():
            for e in range(count):
                record = Record(f"{name}.{e}", EXPERT, kinds)
                for kind in kinds:
                    if kind not in forward_kinds():  # input and output: the gradients are not recorded
                        record.missing[kind] = NO_EXPERT_GRADS
                self.records[record.name] = record

    def hook(self, handles: HandleGroup, name: str, keep: Keep, order: Callable[[], int]) -> None:
        """A forward hook on the experts module ``name`` (if it is one) that fills its experts' sites.

        Args:
            handles: the capture's handle group.
            name: a selected module's name.
            keep: the capture's keeper of leaves (``(leaves, site, kind) -> kept``).
            order: the capture's call counter.
        """
        if name in self.units:
            module, count = self.units[name]
            handles.on_forward(module, partial(self._split, name, count, keep, order), always_call=False)

    def _split(self, name: str, count: int, keep: Keep, order: Callable[[], int], module: nn.Module,
               args: tuple[Any, ...], output: Any) -> None:  # fmt: skip
        if len(args) < 3 or transform() is not None or call_phase().repeat:
            return  # not called as experts(hidden, top_k_index, top_k_weights), or checkpointing's rerun of a call
        for e, rows, out, weight in split_by_expert(module, args, count):
            record = self.records[f"{name}.{e}"]
            call = Call(record.name, record.called(), order=order())
            record.add_call(call)
            call.missing.update(record.missing)  # no gradients: recomputed without autograd
            if "output" in self.kinds:
                leaves = [("out", out), ("positions", rows), ("weight", weight)]
                call.tensors["output"] = keep(leaves, record.name, "output")
            if "input" in self.kinds:
                call.tensors["input"] = keep([("args[0]", args[0][rows])], record.name, "input")


@dataclass(frozen=True)
class RouterStats:
    """The router statistics of one experts module over the calls read.

    Attributes:
        tokens: ``(experts,)`` float64, how many (token, slot) choices went to each expert.
        total: how many tokens were routed (each to ``k`` experts).
        cv: the coefficient of variation of ``tokens`` (population std / mean): 0 when balanced.
        aux_loss: the Switch Transformer load-balancing loss ``experts * sum_e (tokens_e / total) * P_e``, with
            ``P_e`` the mean router probability of expert ``e`` (transformers' ``load_balancing_loss_func``);
            NaN without the router's logits.
        mean_weight: ``(experts,)`` float64, the mean routing weight of the tokens each expert got (NaN: none).
    """

    tokens: Tensor
    total: int
    cv: float
    aux_loss: float
    mean_weight: Tensor

    @property
    def k(self) -> float:
        """Experts per token: the (token, slot) choices over the tokens."""
        return float(self.tokens.sum()) / self.total if self.total else float("nan")


def tally(index: Tensor, weights: Tensor, count: int) -> tuple[Tensor, Tensor]:
    """``(tokens, weight_sums)``, each ``(count,)`` float64 on the CPU: the choices of each expert in the top-k
    ``index`` ``(tokens, k)`` and the sum of their routing ``weights`` ``(tokens, k)``."""
    flat = index.detach().reshape(-1).long().cpu()
    tokens = torch.zeros(count, dtype=torch.float64).index_add_(0, flat, torch.ones_like(flat, dtype=torch.float64))
    sums = torch.zeros(count, dtype=torch.float64).index_add_(0, flat, weights.detach().reshape(-1).double().cpu())
    return tokens, sums


def prob_sums(logits: Tensor) -> Tensor:
    """``(experts,)`` float64 on the CPU: the router probabilities (softmax of ``logits`` ``(..., experts)``) summed
    over the tokens."""
    flat = logits.detach().reshape(-1, logits.shape[-1]).double()
    return torch.softmax(flat, dim=-1).sum(0).cpu()


def router_stats(tokens: Tensor, total: int, weight_sums: Tensor, probs: Tensor | None = None) -> RouterStats:
    """The ``RouterStats`` of ``total`` tokens from what ``tally`` and ``prob_sums`` add up.

    Args:
        tokens: ``(experts,)`` the choices of each expert (``tally``).
        total: the number of tokens routed.
        weight_sums: ``(experts,)`` the sums of their routing weights (``tally``).
        probs: ``(experts,)`` the router probabilities summed over the tokens (``prob_sums``); None leaves the
            load-balancing loss NaN.

    Returns:
        The ``RouterStats``.
    """
    tokens, count = tokens.double(), tokens.numel()
    mean = float(tokens.mean())
    cv = float(tokens.std(unbiased=False)) / mean if mean > 0 else float("nan")
    aux = float("nan")
    if probs is not None and total:
        aux = float(count * ((tokens / total) * (probs.double() / total)).sum())
    return RouterStats(tokens=tokens, total=total, cv=cv, aux_loss=aux, mean_weight=weight_sums.double() / tokens)
