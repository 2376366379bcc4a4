"""``watch`` on fused mixture-of-experts layers (``hookscope.train.expert_rows``): a row per expert whose gradient
norm is that of its slice of the fused gradients, computed here by hand, and the routing as scalars."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import hookscope
from tests.moe import EXPERTS, FAMILIES, TOP_K, router_name, tiny_moe

FUSED = "model.layers.0.mlp.experts"


def _train(model: torch.nn.Module, steps: int, out: Path | None = None) -> tuple[hookscope.Watch, list[float]]:
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(4))
    warned = pytest.warns(hookscope.CaptureWarning, match=f"'{FUSED}' \\(gate_up_proj .*watch adds a row per expert")
    with warned, hookscope.watch(model, opt, every=1, out=out) as w:
        for _ in range(steps):
            opt.zero_grad()
            model(ids, labels=ids).loss.backward()
            opt.step()
    fused = model.get_submodule(FUSED)
    by_hand = [  # the last step's gradient of each expert: its slice of every fused parameter
        math.sqrt(sum(float(p.grad[e].double().square().sum()) for p in fused.parameters(recurse=False)))
        for e in range(EXPERTS)
    ]
    return w, by_hand


@pytest.mark.parametrize("family", FAMILIES)
def test_watch_rows_per_expert_hold_the_gradient_norm_of_its_slice(family: str) -> None:
    model = tiny_moe(family)
    w, by_hand = _train(model, steps=2)
    assert w.history(FUSED)["grad_norm"][-1] == pytest.approx(math.sqrt(sum(g * g for g in by_hand)), rel=1e-6)
    for e in range(EXPERTS):
        history = w.history(f"{FUSED}.{e}")
        assert history.type == "Expert" and len(history["grad_norm"]) == 2
        assert history["grad_norm"][-1] == pytest.approx(by_hand[e], rel=1e-6)
        weights = [p.detach()[e].double() for p in model.get_submodule(FUSED).parameters(recurse=False)]
        assert history["weight_norm"][-1] == pytest.approx(math.sqrt(sum(float(t.square().sum()) for t in weights)))
        assert (history["update_ratio"][-1] > 0) == (by_hand[e] > 0)  # SGD moves the experts that got tokens
        assert math.isnan(history["act_mean"][-1])


def test_watch_logs_the_routing_of_each_logged_step(tmp_path: Path) -> None:
    model = tiny_moe("mixtral")
    captured: list[torch.Tensor] = []
    router = model.get_submodule(router_name("mixtral"))
    handle = router.register_forward_hook(lambda m, a, out: captured.append(out[0].detach()))
    try:
        _train(model, steps=1, out=tmp_path / "run.hookscope")
    finally:
        handle.remove()
    chosen = captured[0].argsort(dim=-1, descending=True)[:, :TOP_K]  # the oracle, on the router's logits
    expected = torch.bincount(chosen.flatten(), minlength=EXPERTS)
    scalars = hookscope.load(tmp_path / "run.hookscope").scalars()
    assert [scalars[f"{FUSED}/tokens.{e}"][0][1] for e in range(EXPERTS)] == expected.tolist()
    cv = float(expected.double().std(unbiased=False) / expected.double().mean())
    assert scalars[f"{FUSED}/tokens_cv"][0][1] == pytest.approx(cv)
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    reference = float(load_balancing_loss_func((captured[0],), EXPERTS, TOP_K))
    assert scalars[f"{FUSED}/balance_loss"][0][1] == pytest.approx(reference, rel=1e-5)
    run = hookscope.load(tmp_path / "run.hookscope")
    assert run.history(f"{FUSED}.0")["grad_norm"][0] > 0
