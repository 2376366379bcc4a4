"""``routing(cap)``: tokens per expert against an argsort of the router logits computed by hand, the
load-balancing loss against transformers' own ``load_balancing_loss_func``, and its faces."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

import hookscope
from hookscope.base.display import section_of
from tests.moe import EXPERTS, FAMILIES, HIDDEN, TOP_K, router_name, tiny_moe

FUSED = "model.layers.{}.mlp.experts"


def _by_hand(family: str, model: torch.nn.Module, x: torch.Tensor, layer: int) -> torch.Tensor:
    """The router logits of ``layer`` computed from its input and weight."""
    router = model.get_submodule(router_name(family, layer))
    return F.linear(x.reshape(-1, HIDDEN), router.weight, getattr(router, "bias", None))


@pytest.mark.parametrize("family", FAMILIES)
def test_tokens_per_expert_equal_an_argsort_of_the_router_logits(family: str) -> None:
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    model = tiny_moe(family, layers=2)
    ids = torch.randint(0, 50, (3, 8), generator=torch.Generator().manual_seed(3))
    routers = [router_name(family, layer) for layer in (0, 1)]
    with hookscope.capture(model, [":experts", *routers], kinds=("input", "output")) as cap:
        model(ids)
        model(ids[:1, :5])  # a second call of every layer: counted too
    found = hookscope.routing(cap)
    assert list(found) == [FUSED.format(0), FUSED.format(1)]
    for layer in (0, 1):
        with torch.no_grad():
            logits = torch.cat([_by_hand(family, model, c.get("input"), layer) for c in cap[routers[layer]].calls])
        chosen = logits.argsort(dim=-1, descending=True)[:, :TOP_K]  # the oracle: an argsort, by hand
        expected = torch.bincount(chosen.flatten(), minlength=EXPERTS).double()
        stats = found[FUSED.format(layer)]
        assert torch.equal(stats.tokens, expected)
        assert stats.total == 3 * 8 + 5
        assert stats.k == TOP_K
        assert stats.cv == pytest.approx(statistics.pstdev(expected.tolist()) / statistics.mean(expected.tolist()))
        reference = load_balancing_loss_func((logits,), EXPERTS, TOP_K)  # transformers' Switch loss
        assert stats.aux_loss == pytest.approx(float(reference), rel=1e-6)


def test_mean_weight_is_the_mean_routing_weight_of_each_expert() -> None:
    model = tiny_moe("mixtral")
    with hookscope.capture(model, [":experts", "model.layers.0.mlp.experts"], kinds=("input", "output")) as cap:
        model(torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]]))
    _, index, weights = cap[FUSED.format(0)].input.args  # what the experts module was given
    stats = hookscope.routing(cap)[FUSED.format(0)]
    for e in range(EXPERTS):
        mine = weights[index == e]
        if len(mine):
            assert float(stats.mean_weight[e]) == pytest.approx(float(mine.mean()))
        else:
            assert torch.isnan(stats.mean_weight[e])


def test_routing_shows_as_a_table_and_a_report_section() -> None:
    model = tiny_moe("qwen3_moe")
    with hookscope.capture(model, ":experts") as cap:
        model(torch.tensor([[1, 2, 3, 4]]))
    found = hookscope.routing(cap)
    table = found.table()
    assert table.splitlines()[0].split() == ["experts", "tokens", "k", "cv", "balance", "loss", "least", "used",
                                             "most", "used"]  # fmt: skip
    tokens = [int(t) for t in found[FUSED.format(0)].tokens]
    assert f"{FUSED.format(0)}: tokens per expert {tokens}" in table
    place = section_of(found)
    assert place is not None and place[:2] == ("routing", "How are tokens routed to experts?")
    assert "tokens per expert" in place[2] and '<img class="hs-thumb" src="data:image/png;base64,' in place[2]
    assert found.plot().size[0] > 200  # the heatmap of each layer's share per expert


def test_routing_of_a_capture_without_experts_says_what_to_select() -> None:
    model = tiny_moe("mixtral")
    with hookscope.capture(model, "model.layers.0.mlp") as cap:
        model(torch.tensor([[1, 2]]))
    with pytest.raises(hookscope.NotCapturedError, match="capture with select=':experts'"):
        hookscope.routing(cap)


def test_routing_is_a_section_of_a_report_page() -> None:
    model = tiny_moe("gpt_oss")
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with hookscope.capture(model, ":experts") as cap:
        model(ids)
    page = hookscope.render_html(hookscope.build_report(model, ids, sections=[hookscope.routing(cap)]))
    assert 'id="routing"' in page and "How are tokens routed to experts?" in page


def test_routing_of_a_saved_capture_equals_the_capture_s(tmp_path: Path) -> None:
    model = tiny_moe("qwen3_moe")
    with hookscope.capture(model, ":experts") as cap:
        model(torch.tensor([[5, 4, 3, 2, 1, 0]]))
    here, stored = hookscope.routing(cap), hookscope.routing(hookscope.load(hookscope.save(cap, tmp_path / "a").path))
    assert stored.routers == here.routers == {FUSED.format(0): router_name("qwen3_moe")}
    a, b = here[FUSED.format(0)], stored[FUSED.format(0)]
    assert torch.equal(a.tokens, b.tokens) and a.aux_loss == pytest.approx(b.aux_loss) and a.total == b.total
