"""The logged step's cheaper reads change no value: the update taken in place in the kept copies, the row
norms checked for overflow once per group and the activation moments' temporaries reused in place give
the History rows, bit for bit, of the computation they replace (written out here: a new ``p - before``
per parameter, each tensor's row norms on its own, a new tensor for the moments' squares and signs),
with SGD, SGD with momentum and AdamW, on float32 and bfloat16 parameters."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim import Optimizer

import hookscope
from hookscope.core.placement import local, replicas
from hookscope.stats.norms import each_row_norms, row_norms
from hookscope.train import measures
from hookscope.train.collect import Gathered
from hookscope.train.optimizer_reads import OptimizerReads
from hookscope.train.rank_sums import Ranks

F64 = torch.float64
STEPS = 4


def _old_share(self: Ranks, tensors: Iterable[Tensor]) -> Tensor | None:
    chosen = list(tensors)
    if not chosen:
        return None
    pieces = [local(t) for t in chosen]
    device = pieces[0].device
    parts = [
        row_norms(p).to(device, F64).square().sum() / replicas(t, self.size)
        for p, t in zip(pieces, chosen, strict=True)
    ]
    return torch.stack(parts).sum()


def _old_updates(self: OptimizerReads, optimizer: Optimizer, gathered: dict[str, Gathered], ranks: Ranks) -> None:
    by_site: dict[str, tuple[list[Tensor], list[Tensor]]] = {}
    for p in (p for group in optimizer.param_groups for p in group["params"]):
        before, site = self.before.pop(id(p), None), self.owner.get(id(p))
        if before is not None and site is not None:
            updates, weights = by_site.setdefault(site, ([], []))
            updates.append(p.detach() - before)
            weights.append(before)
    for site, (updates, weights) in by_site.items():
        g = gathered[site]
        delta, old = ranks.share(updates), ranks.share(weights)
        g.delta_sq = delta if g.delta_sq is None else g.delta_sq + delta
        g.before_sq = old if g.before_sq is None else g.before_sq + old


def _old_moments(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    n = x.numel()
    mean = x.sum() / n
    m2 = (x - mean).square().sum()
    magnitude = x.abs()
    others = [d for d in range(x.dim()) if d != dim]
    nonzero = magnitude.sign().sum(dim=others) if others else magnitude.sign().reshape(-1)
    sums = torch.stack([mean, m2, magnitude.sum(), nonzero.sum()]).to(F64)
    count = torch.tensor(float(n), dtype=F64, device=x.device)
    return torch.stack([count, sums[0], sums[1], sums[2], count - sums[3]]), nonzero > 0


OPTIMIZERS: dict[str, Callable[[Iterable[Tensor]], Optimizer]] = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2),
}


def _rows(optimizer: str, dtype: torch.dtype) -> dict[str, Tensor]:
    torch.manual_seed(0)  # a weight of 5,120 elements: a full row of 4,096 and a shorter one
    model = nn.Sequential(nn.Linear(80, 64), nn.ReLU(), nn.Linear(64, 10)).to(dtype)
    opt = OPTIMIZERS[optimizer](model.parameters())
    x, y = torch.randn(16, 80, dtype=dtype), torch.randint(0, 10, (16,))
    with hookscope.watch(model, opt, every=1) as w:
        for _ in range(STEPS):
            loss = F.cross_entropy(model(x).float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {name: h.rows for name, h in w.histories().items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_rows_bit_identical_to_the_per_tensor_reads(
    optimizer: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = _rows(optimizer, dtype)
    monkeypatch.setattr(Ranks, "share", _old_share)
    monkeypatch.setattr(OptimizerReads, "updates", _old_updates)
    monkeypatch.setattr(measures, "_moments", _old_moments)
    old = _rows(optimizer, dtype)
    assert sorted(new) == sorted(old) == ["0", "1", "2"]
    for name, rows in new.items():
        assert rows.shape == (STEPS, 10)
        assert torch.equal(rows.isnan(), old[name].isnan()), name
        assert torch.equal(rows.nan_to_num(), old[name].nan_to_num()), name  # every column, every step
    assert not new["0"][:, 9].isnan().any()  # the update ratio is measured, not NaN on both sides


def test_each_row_norms_is_row_norms_of_each_even_when_one_overflows() -> None:
    torch.manual_seed(0)
    tensors = [torch.randn(5000), torch.randn(3, 7).to(torch.bfloat16), torch.randn(10, dtype=F64)]
    big = torch.full((4100,), 3e19)  # float32 squares overflow: that row is taken in float64, finite
    for group in (tensors, [*tensors, big]):
        got, want = each_row_norms(group), [row_norms(t) for t in group]
        assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want, strict=True))
    assert torch.isfinite(each_row_norms([tensors[0], big])[1]).all()
    assert each_row_norms([tensors[0], big])[1][0] == pytest.approx(float(big[0]) * 64, rel=1e-12)  # sqrt(4096) = 64
