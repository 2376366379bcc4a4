"""The selector ``":experts"`` and one capture site per fused expert (``hookscope.core.experts``), on tiny random
Qwen3-MoE, Mixtral and gpt-oss models from their transformers configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

import hookscope
from hookscope.errors import SelectionError
from tests.models import LeNet
from tests.moe import EXPERTS, FAMILIES, TOP_K, router_name, tiny_moe

BLOCK, FUSED = "model.layers.0.mlp", "model.layers.0.mlp.experts"


@pytest.mark.parametrize("family", FAMILIES)
def test_experts_selects_each_fused_experts_module_and_its_router(family: str) -> None:
    model = tiny_moe(family, layers=2)
    names = {name for name, _ in hookscope.select_modules(model, ":experts")}
    assert names == {FUSED, router_name(family), "model.layers.1.mlp.experts", router_name(family, 1)}


@pytest.mark.parametrize("family", FAMILIES)
def test_experts_weighted_by_routing_sum_to_the_block_output(family: str) -> None:
    model = tiny_moe(family)
    ids = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(1))
    with hookscope.capture(model, [":experts", BLOCK], kinds=("input", "output")) as cap:
        model(ids)
    block = cap[BLOCK].output
    block = (block[0] if isinstance(block, tuple) else block).reshape(-1, block_width(block))
    total = torch.zeros_like(block)
    seen = 0
    for e in range(EXPERTS):
        for call in cap[f"{FUSED}.{e}"].calls:
            rows, out, weight = (call.get("output", k) for k in ("positions", "out", "weight"))
            total.index_add_(0, rows, out * weight[:, None])
            assert torch.equal(call.get("input"), cap[FUSED].input.args[0][rows])  # the tokens it was given
            seen += len(rows)
    assert seen == block.shape[0] * TOP_K  # every token went to k experts
    torch.testing.assert_close(total, block, atol=1e-5, rtol=0)


def block_width(value: object) -> int:
    tensor = value[0] if isinstance(value, tuple) else value
    assert isinstance(tensor, torch.Tensor)
    return int(tensor.shape[-1])


@pytest.mark.parametrize("family", FAMILIES)
def test_each_expert_holds_the_tokens_the_router_sent_it(family: str) -> None:
    model = tiny_moe(family)
    ids = torch.randint(0, 50, (1, 9), generator=torch.Generator().manual_seed(2))
    router = router_name(family)
    with hookscope.capture(model, ":experts", kinds=("input", "output")) as cap:
        model(ids)
    module = model.get_submodule(router)
    x = cap[router].input.reshape(-1, 16)
    logits = F.linear(x, module.weight, getattr(module, "bias", None))  # by hand
    chosen = logits.argsort(dim=-1, descending=True)[:, :TOP_K]  # the argsort oracle
    for e in range(EXPERTS):
        expected = (chosen == e).any(-1).nonzero().flatten()
        record = cap[f"{FUSED}.{e}"]
        got = record.calls[0].get("output", "positions") if record.calls else torch.empty(0, dtype=torch.long)
        assert got.tolist() == expected.tolist()


def test_experts_on_a_model_without_fused_experts_is_refused() -> None:
    with pytest.raises(SelectionError, match="':experts' found no fused experts in LeNet"):
        hookscope.select_modules(LeNet(), ":experts")


def test_expert_sites_leave_no_hook_and_keep_no_gradient() -> None:
    model = tiny_moe("mixtral")
    warned = pytest.warns(hookscope.CaptureWarning, match="no grad_output for 'model.layers.0.mlp.experts.")
    with warned, hookscope.capture(model, ":experts", kinds=("output", "grad_output")) as cap:
        model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    record = next(cap[n] for n in cap if cap[n].type == "Expert" and cap[n].calls)
    with pytest.raises(hookscope.NotCapturedError, match="recomputed from the fused parameters"):
        record.calls[0].get("grad_output")


def test_every_leaf_of_a_model_with_fused_experts_names_them_once() -> None:
    model = tiny_moe("qwen3_moe", layers=2)  # its experts module holds parameters beside its act_fn: not a leaf
    named = "'model.layers.0.mlp.experts' \\(gate_up_proj \\(4, 16, 16\\)"
    warned = pytest.warns(hookscope.CaptureWarning, match=named)
    with warned as seen, hookscope.capture(model) as cap:
        model(torch.tensor([[1, 2, 3]]))
    assert len([w for w in seen if "fused expert parameters" in str(w.message)]) == 1
    assert "'model.layers.1.mlp.experts'" in str(seen[0].message) and "select ':experts'" in str(seen[0].message)
    assert FUSED not in cap


def test_checkpointings_rerun_of_the_experts_adds_no_expert_call() -> None:
    model = tiny_moe("mixtral").train()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    with hookscope.capture(model, ":experts") as cap:
        model(torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss.backward()
    calls = {e: len(cap[f"{FUSED}.{e}"].calls) for e in range(EXPERTS)}
    assert set(calls.values()) <= {0, 1} and sum(calls.values()) > 0
    assert (
        sum(len(c.get("output", "positions")) for e in range(EXPERTS) for c in cap[f"{FUSED}.{e}"].calls) == 4 * TOP_K
    )


def test_extract_says_a_store_keeps_no_site_per_expert(tmp_path: Path) -> None:
    model = tiny_moe("mixtral")
    loader = [torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(5))]
    with pytest.warns(hookscope.StoreWarning, match="the store keeps their outputs .* not one site per expert") as seen:
        run = hookscope.extract(model, loader, out=tmp_path / "x.hookscope", select=":experts", progress=False)
    assert seen[0].filename == __file__  # the caller's line
    assert list(run) == [router_name("mixtral"), FUSED]


def test_experts_below_named_modules_and_experts_by_name_as_one_site() -> None:
    model = tiny_moe("gpt_oss", layers=2)
    picked = [name for name, _ in hookscope.select_modules(model, "model.layers.1:experts")]
    assert picked == ["model.layers.1.mlp.router", "model.layers.1.mlp.experts"]
    with pytest.raises(SelectionError, match=r"'model\.norm:experts' found no fused experts"):
        hookscope.select_modules(model, "model.norm:experts")
    with hookscope.capture(model, ["model.layers.1:experts", FUSED]) as cap:
        model(torch.tensor([[1, 2, 3]]))
    assert f"{FUSED}.0" not in cap and any(f"model.layers.1.mlp.experts.{e}" in cap for e in range(EXPERTS))
    with hookscope.capture(model, FUSED) as cap:  # by name: one site, the weighted sum of its experts
        model(torch.tensor([[1, 2, 3]]))
    assert list(cap) == [FUSED]
