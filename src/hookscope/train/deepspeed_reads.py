"""DeepSpeed ZeRO stages 1 and 2 under a watch: the gradients and updates DeepSpeed keeps in its partitions.

::

    model_engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=sgd, config=config)
    with hookscope.watch(model_engine, every=50) as w:   # or watch(model_engine, opt): the same
        ...

DeepSpeed's ZeRO optimizer (``DeepSpeedZeroOptimizer``, stages 1 and 2) gives each rank a flat fp32
partition of the trained parameters, which its torch optimizer steps, once per parameter group: when
it does, the model's parameters hold no gradient (``param.grad`` is None) and they receive the new
weights only after it (an all-gather). Each parameter's fragment of this rank's partition is
DeepSpeed's ``param._hp_mapping``, what ``deepspeed.utils.safe_get_full_grad`` and
``safe_get_full_fp32_param`` assemble with an all-reduce of the whole parameter. ``ZeroReads`` reads
the fragments in the torch optimizer's step hooks instead: the gradient the optimizer steps with (the
partition's ``.grad``, unscaled and clipped by DeepSpeed; ``safe_get_full_grad`` refuses to read it
inside the step), the weights before and after the step. A rank sums the squares of its fragments
(a fragment is on one rank only), and the sums added over the ranks (``rank_sums.merge``) are the
global norms: no collective of its own.

``zero_of(model, optimizer)`` finds the ZeRO optimizer: the engine's own (``watch(model_engine)``)
or the one passed. What else DeepSpeed may hand over is refused by name at entry (``refuse``): ZeRO-3
(``core.placement.refuse_zero3``), its ``BF16_Optimizer`` and ``FP16_Optimizer``, and a model whose
parameters DeepSpeed partitions watched without its engine or optimizer.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from ..core.compiled import ENGINE
from ..errors import OptionError
from ..stats.norms import squared_norm
from .collect import Gathered
from .optimizer_reads import OptimizerReads
from .rank_sums import Ranks

ZERO = "deepspeed.runtime.zero.stage_1_and_2"  # the module of DeepSpeedZeroOptimizer


def is_engine(model: object) -> bool:
    """A ``DeepSpeedEngine`` (never imports DeepSpeed: no engine exists before it is imported)."""
    kind = getattr(sys.modules.get(ENGINE), "DeepSpeedEngine", None)
    return isinstance(kind, type) and isinstance(model, kind)


def zero_of(model: nn.Module, optimizer: object) -> Any:
    """The ``DeepSpeedZeroOptimizer`` (stages 1, 2) of ``model`` (an engine) or ``optimizer``, or None.

    Raises:
        OptionError: a DeepSpeed optimizer hookscope cannot read, or parameters DeepSpeed partitions
            with neither its engine nor its optimizer given.
    """
    given = [o for o in (optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]) if o is not None]
    found = [model.optimizer] if is_engine(model) and getattr(model, "optimizer", None) is not None else []
    for candidate in [*given, *found]:
        if type(candidate).__module__ == ZERO:
            return candidate
        if type(candidate).__module__.startswith("deepspeed."):
            refuse(model, candidate)
    if not given and not found and any(hasattr(p, "_hp_mapping") for p in model.parameters()):
        raise OptionError(
            f"{type(model).__name__}'s parameters are partitioned by DeepSpeed ZeRO, whose gradients watch reads "
            "through its optimizer: pass the engine as the model (watch(model_engine)) or its optimizer "
            "(watch(model, optimizer=opt), opt from deepspeed.initialize)"
        )
    return None


def refuse(model: nn.Module, optimizer: object) -> None:
    """Raise ``OptionError`` for a DeepSpeed optimizer that keeps its fp32 weights and gradients unread.

    Raises:
        OptionError: always, naming DeepSpeed, the stage (when the engine tells it) and the optimizer.
    """
    stage = f" ZeRO stage {model.zero_optimization_stage()}" if is_engine(model) else ""  # type: ignore[operator]
    raise OptionError(
        f"watch cannot read DeepSpeed{stage} with {type(optimizer).__name__}: it keeps the gradients and "
        "fp32 weights where hookscope does not read them; use ZeRO stage 1 or 2 through DeepSpeedZeroOptimizer "
        "(bf16 weights with fp32 gradient accumulation get it at stage 2), or PyTorch FSDP2 (fully_shard)"
    )


class ZeroReads(OptimizerReads):
    """``OptimizerReads`` of the parameters a ``DeepSpeedZeroOptimizer`` (``zero``) partitions over the ranks."""

    def __init__(self, sites: list[tuple[str, nn.Module]], zero: Any) -> None:
        super().__init__(sites)
        self.zero = zero
        flats: list[Tensor] = zero.single_partition_of_fp32_groups  # this rank's partition of each group
        self.parts = {  # id(flat partition) -> its watched parameters, (site, parameter)
            id(flat): [(self.owner[id(p)], p) for p in group if id(p) in self.owner]
            for flat, group in zip(flats, zero.bit16_groups, strict=True)
        }
        self.partitioned = {id(p) for group in zero.bit16_groups for p in group}
        self.names = {id(p): n for site in self.modules for n, p in self.named(site)}

    def ends_step(self, optimizer: Optimizer) -> bool:
        """Whether ``optimizer``'s step now is the last group's (DeepSpeed steps its groups one at a time)."""
        return _flat(optimizer) is self.zero.single_partition_of_fp32_groups[-1]

    def keep_weights(self, optimizer: Optimizer) -> None:
        """Copy this rank's fragments of the watched weights ``optimizer`` is about to step."""
        for _, p in self.parts.get(id(_flat(optimizer)), []):
            if (piece := _fragment(p)) is not None:
                self.before[id(p)] = piece.detach().clone()

    def updates(self, optimizer: Optimizer, gathered: dict[str, Gathered], ranks: Ranks) -> None:
        """Add each site's squared update and weight norms across the step (this rank's fragments)."""
        by_site: dict[str, tuple[list[Tensor], list[Tensor]]] = {}
        for site, p in self.parts.get(id(_flat(optimizer)), []):
            updates, weights = by_site.setdefault(site, ([], []))
            before, piece = self.before.pop(id(p), None), _fragment(p)
            if before is not None and piece is not None:
                updates.append(piece.detach() - before)
                weights.append(before)
        for site, (updates, weights) in by_site.items():
            g = gathered[site]
            g.delta_sq = _added(g.delta_sq, updates)
            g.before_sq = _added(g.before_sq, weights)

    def grads(self, optimizer: Optimizer | None, gathered: dict[str, Gathered], ranks: Ranks, *,
              scale: Tensor | None = None, keep: bool = False) -> None:  # fmt: skip
        """Add the squared norms of this rank's fragments of the gradients ``optimizer`` steps with (None: the
        parameters DeepSpeed does not partition, as ``OptimizerReads``); ``scale`` does not apply (DeepSpeed
        unscales them); ``keep``: clones of the fragments, for histograms."""
        if optimizer is None:
            super().grads(None, gathered, ranks)
            return
        flat = _flat(optimizer)
        by_site: dict[str, list[Tensor]] = {}
        for site, p in self.parts.get(id(flat), []):
            mapping = getattr(p, "_hp_mapping", None)
            address = None if mapping is None else mapping.get_hp_fragment_address()
            pieces = by_site.setdefault(site, [])
            if address is not None and flat is not None and flat.grad is not None:
                pieces.append(flat.grad.narrow(0, address.start, address.numel))
                if keep:  # TensorBoard's histogram: this rank's fragment, as a DTensor's local piece
                    gathered[site].grads[self.names[id(p)]] = pieces[-1].clone()
        for site, pieces in by_site.items():
            gathered[site].grad_sq = _added(gathered[site].grad_sq, pieces)

    def weight_sq(self, params: Sequence[Tensor], ranks: Ranks) -> Tensor | None:
        """This rank's share of the squared norm of ``params``: its fragments of the partitioned ones (the
        weights after the step: the model's get them only after it), a share of the others."""
        pieces = [piece for p in params if id(p) in self.partitioned and (piece := _fragment(p)) is not None]
        own = _added(None, pieces) if any(id(p) in self.partitioned for p in params) else None
        rest = ranks.share(p for p in params if id(p) not in self.partitioned)
        return own if rest is None else rest if own is None else own + rest.to(own.device)


def _flat(optimizer: Optimizer) -> Tensor | None:
    """The flat partition ``optimizer`` steps now (DeepSpeed gives it one group at a time)."""
    params = optimizer.param_groups[0]["params"] if optimizer.param_groups else []
    return params[0] if len(params) == 1 else None


def _fragment(p: Tensor) -> Tensor | None:
    """This rank's fp32 fragment of ``p`` (a view of the flat partition), None when another rank holds it all."""
    mapping = getattr(p, "_hp_mapping", None)
    return None if mapping is None else cast(Tensor, mapping.get_hp_fragment())


def _added(total: Tensor | None, pieces: list[Tensor]) -> Tensor:
    """``total`` plus the float64 sum of squares of ``pieces`` (zero for none: the other ranks hold them)."""
    part = squared_norm(pieces)
    if part is None:
        part = torch.zeros((), dtype=torch.float64)
    return part if total is None else total + part.to(total.device)
