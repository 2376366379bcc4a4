"""watch(scaler=) against hand loops: the norms of a GradScaler's run are the unscaled run's, a skipped
step is no step and no alert, and bf16 autocast raises the alerts float32 raises."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope

STEPS = 5


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(STEPS)]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))


def _plain(model: nn.Module, opt: torch.optim.Optimizer, batches: list) -> hookscope.Watch:
    with hookscope.watch(model, opt, every=1) as w:
        for x, y in batches:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return w


def _scaled(model: nn.Module, opt: torch.optim.Optimizer, batches: list, *, broken: int = -1) -> hookscope.Watch:
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    with hookscope.watch(model, opt, every=1, scaler=scaler) as w:
        for i, (x, y) in enumerate(batches):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y) * (math.inf if i == broken else 1.0)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    return w


@pytest.mark.parametrize("fused", [False, True])
def test_scaled_norms_are_the_unscaled_runs(fused: bool) -> None:
    """Under a scale of 2**16, grad_norm and grad_output_norm equal the run without a scaler."""
    batches, model = _batches(), _model()
    twin = copy.deepcopy(model)
    make = (lambda m: torch.optim.Adam(m.parameters(), lr=1e-3, fused=True)) if fused else (
        lambda m: torch.optim.SGD(m.parameters(), lr=0.1))  # fmt: skip
    reference = _plain(twin, make(twin), batches)
    w = _scaled(model, make(model), batches)
    assert w.steps == STEPS and w.skipped == []
    for name in ("0", "2"):
        torch.testing.assert_close(
            w.history(name).rows, reference.history(name).rows, rtol=1e-6, atol=0, equal_nan=True
        )
    # the oracle of step 0: the hand-computed norm of the first layer's gradient, unscaled
    hand = copy.deepcopy(_model())
    F.cross_entropy(hand(batches[0][0]), batches[0][1]).backward()
    expected = torch.cat([p.grad.flatten() for p in hand[0].parameters()]).double().norm().item()
    assert w.history("0")["grad_norm"][0] == pytest.approx(expected, rel=1e-6)


def test_a_skipped_step_is_counted_as_skipped_not_as_a_step() -> None:
    """An inf loss at iteration 2: the scaler skips it; the watch's rows are those of a run without it."""
    batches, model = _batches(), _model()
    twin = copy.deepcopy(model)
    reference = _plain(twin, torch.optim.SGD(twin.parameters(), lr=0.1), batches[:2] + batches[3:])
    w = _scaled(model, torch.optim.SGD(model.parameters(), lr=0.1), batches, broken=2)
    assert w.steps == STEPS - 1 and w.skipped == [2]
    assert [a for a in w.alerts if a.kind == "non_finite"] == []
    for name in ("0", "1", "2"):
        torch.testing.assert_close(
            w.history(name).rows, reference.history(name).rows, rtol=1e-6, atol=0, equal_nan=True
        )


def test_scaler_must_be_a_grad_scaler() -> None:
    with pytest.raises(hookscope.OptionError, match=r"scaler= takes a torch\.amp\.GradScaler, got int"):
        hookscope.watch(nn.Linear(2, 2), scaler=3)


def test_bf16_autocast_raises_the_alerts_of_float32() -> None:
    """A layer with dead units and a tiny learning rate: the same alerts (kind, module, step) in both."""
    found = []
    for autocast in (False, True):
        model = _model()
        with torch.no_grad():
            model[0].bias[:8] = -50.0
        opt = torch.optim.SGD(model.parameters(), lr=1e-9)
        with hookscope.watch(model, opt, every=1) as w:
            for x, y in _batches():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        found.append([(a.kind, a.module, a.step) for a in w.alerts])
    assert found[0] and found[0] == found[1]


def _fp16_start(model: nn.Module, batches: list, *, manual: bool) -> hookscope.Watch:
    """fp16 autocast on the CPU with a scale so high that the first 3 backward passes overflow (fp16 inf)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40, backoff_factor=2.0**-8)  # 2**40, 2**32, 2**24, 2**16
    with hookscope.watch(model, opt, every=1, scaler=scaler) as w:
        for x, y in batches:
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if manual:
                w.step()
    return w


@pytest.mark.parametrize("manual", [False, True])
def test_an_fp16_start_whose_steps_all_overflow_raises_nothing(manual: bool) -> None:
    """Three steps, all skipped by the scaler, the block ends after the last: no step, no row, no alert."""
    w = _fp16_start(_model(), _batches()[:3], manual=manual)
    assert (w.steps, w.skipped, w.alerts) == (0, [0, 0, 0], [])
    assert all(len(h) == 0 for h in w.histories().values())


def test_w_step_after_a_skipped_step_is_no_step() -> None:
    """With w.step() called every iteration, the three skipped steps are no steps: the rows of the run
    counted by the optimizer (whose steps the scaler skips), and no alert."""
    batches = _batches()
    counted = _fp16_start(_model(), batches, manual=False)
    w = _fp16_start(_model(), batches, manual=True)
    assert (w.steps, w.skipped, w.alerts) == (STEPS - 3, [0, 0, 0], []) and counted.steps == STEPS - 3
    for name in ("0", "1", "2"):
        torch.testing.assert_close(w.history(name).rows, counted.history(name).rows, rtol=0, atol=0, equal_nan=True)
