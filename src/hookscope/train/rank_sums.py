"""A watch under torchrun: every rank's sums of a logged step gathered in one collective, merged on the host.

Under DDP, FSDP2 or tensor parallelism each rank measures what it holds: its batch's activations,
its local shards of the parameters and gradients (``core.placement``). ``share`` turns a group of
parameters or gradients into this rank's share of their global sum of squares (each tensor's
local sum divided by the ranks that hold a copy of it), so that the shares added over the ranks
are the global sum. When a logged step ends, ``Ranks.gather`` brings every rank's table of sums
(sites x ``collect.SLOTS``, float64) to every rank in one ``all_gather`` (a few hundred bytes a
site), and ``merge`` makes one global row per site:

- parameter sums (``grad_sq``, ``weight_sq``, ``delta_sq``, ``before_sq``): the shares added;
- activation moments and the output gradient: the ranks' distinct moments combined with Chan's
  formula (``measures.combine``), as one process would see the whole batch (DDP, FSDP2) or the
  whole activation (a tensor-parallel shard). Ranks that hold the very same activation (a
  row-parallel layer's output, replicated) give bit-equal moments and count once;
- the dead fraction: the mean of the distinct ranks' fractions (a unit counts as dead where it
  was zero on that rank's batches).

Every rank computes the same rows from the same gathered table, so alerts agree across ranks;
rank 0 writes the store, with each rank's own rows beside the merged ones (``watch_store``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..base.world import World
from ..core.placement import local, replicas
from ..stats.norms import each_row_norms
from ..store.history import COLUMNS, History
from .collect import SLOTS, host_row
from .measures import ACT, F64, combine

SUMMED = ("grad_sq", "weight_sq", "delta_sq", "before_sq")
MOMENTS = (*ACT, "grad_output_sq")  # per rank: an activation, its gradient; equal on two ranks = one activation


@dataclass(frozen=True)
class Ranks(World):
    """This process among its ranks (``base.world.World``: ``current()``, ``gather``, ``barrier``), with the
    watch's share of a global sum of squares."""

    def share(self, tensors: Iterable[Tensor]) -> Tensor | None:
        """This rank's share of the global sum of squares of ``tensors`` (float64), None when there is none."""
        chosen = list(tensors)
        if not chosen:
            return None
        norms = each_row_norms([local(t) for t in chosen])
        device = norms[0].device
        parts = [n.to(device, F64).square().sum() / replicas(t, self.size) for n, t in zip(norms, chosen, strict=True)]
        return torch.stack(parts).sum()


class RankRows:
    """Each rank's own rows of a watch (``types``: site -> module type), kept under torchrun only."""

    def __init__(self, types: dict[str, str], size: int) -> None:
        self.types = types
        self.rows: list[dict[str, list[list[float]]]] = (
            [{n: [] for n in types} for _ in range(size)] if size > 1 else []
        )

    def add(self, step: int, names: list[str], tables: list[list[list[float]]]) -> None:
        """A logged step's gathered tables (one per rank, a row of ``SLOTS`` per site in ``names`` order)."""
        for table, rows in zip(tables, self.rows, strict=False):
            for name, slots in zip(names, table, strict=True):
                row = host_row(step, slots)
                rows[name].append([row[c] for c in COLUMNS])

    def histories(self) -> list[dict[str, History]]:
        """Each rank's histories, in rank order (empty in a world of one)."""
        return [
            {
                n: History(n, self.types[n], torch.tensor(r, dtype=F64).reshape(-1, len(COLUMNS)))
                for n, r in rows.items()
            }
            for rows in self.rows
        ]


def merge(rows: list[list[float]]) -> list[float]:
    """One site's ``SLOTS`` from each rank's (the global one; see the module docstring)."""
    if len(rows) == 1:
        return rows[0]
    slot = {name: i for i, name in enumerate(SLOTS)}
    distinct: list[list[float]] = []
    for row in rows:
        key = [row[slot[s]] for s in MOMENTS]
        if all(_differs(key, [d[slot[s]] for s in MOMENTS]) for d in distinct):
            distinct.append(row)
    out = list(rows[0])
    for name in SUMMED:
        out[slot[name]] = sum(row[slot[name]] for row in rows)
    act = torch.tensor([[d[slot[a]] for a in ACT] for d in distinct], dtype=F64)
    merged = act[0]
    for other in act[1:]:
        merged = combine(merged, other) if merged[0] > 0 else other
    out[slot["count"] : slot["count"] + len(ACT)] = merged.tolist()
    out[slot["grad_output_sq"]] = sum(d[slot["grad_output_sq"]] for d in distinct)
    out[slot["dead"]] = sum(d[slot["dead"]] for d in distinct) / len(distinct)
    return out


def _differs(a: list[float], b: list[float]) -> bool:
    """Not the same values (NaN equal to NaN: two ranks that measured nothing are alike)."""
    return any(x != y and not (x != x and y != y) for x, y in zip(a, b, strict=True))
