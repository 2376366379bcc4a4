"""The architecture sweep's newer families, built tiny and random from their transformers configs:
mixture-of-experts (Qwen3-MoE, Mixtral: fused 3-D expert parameters) and linear attention
(Qwen3-Next's GatedDeltaNet layers, Mamba). What hookscope does on them today: ``":blocks"`` is the
decoder layers, ``capture`` of them gives the hidden states, and ``watch`` covers every parameter,
the fused experts' included (with the one warning that names them). Oracles: each config (its layer
count), the model's own ``output_hidden_states``, and ``param.grad`` of a twin stepped without any hook."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.core.blocks import blocks
from hookscope.errors import CaptureWarning

transformers = pytest.importorskip("transformers")

SMALL: dict[str, Any] = {"vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2,
                         "num_key_value_heads": 1, "head_dim": 8}  # fmt: skip


def qwen3_moe() -> nn.Module:
    config = transformers.Qwen3MoeConfig(**SMALL, moe_intermediate_size=8, num_hidden_layers=2, num_experts=4,
                                         num_experts_per_tok=2)  # fmt: skip
    return transformers.Qwen3MoeForCausalLM(config)


def mixtral() -> nn.Module:
    config = transformers.MixtralConfig(**SMALL, num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2)
    return transformers.MixtralForCausalLM(config)


def qwen3_next() -> nn.Module:
    config = transformers.Qwen3NextConfig(**SMALL, moe_intermediate_size=8, shared_expert_intermediate_size=8,
                                          num_hidden_layers=4, num_experts=4, num_experts_per_tok=2,
                                          linear_num_value_heads=2, linear_num_key_heads=1, linear_key_head_dim=8,
                                          linear_value_head_dim=8)  # fmt: skip
    assert config.layer_types == ["linear_attention"] * 3 + ["full_attention"]  # GatedDeltaNet, then softmax
    return transformers.Qwen3NextForCausalLM(config)


def mamba() -> nn.Module:
    config = transformers.MambaConfig(vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2,
                                      conv_kernel=2, time_step_rank=2)  # fmt: skip
    return transformers.MambaForCausalLM(config)


FAMILIES = [(qwen3_moe, "model.layers"), (mixtral, "model.layers"), (qwen3_next, "model.layers"),
            (mamba, "backbone.layers")]  # fmt: skip
FIRST = {mamba: 0}  # where layer 0's output sits in output_hidden_states: after the embeddings, but Mamba lists none
IDS = ["qwen3_moe", "mixtral", "qwen3_next", "mamba"]


def built(make: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return make().eval()  # float32: the fused experts run torch._grouped_mm, which takes no float64


@pytest.mark.parametrize(("make", "layers"), FAMILIES, ids=IDS)
def test_blocks_are_the_decoder_layers_and_capture_gives_their_hidden_states(
    make: Callable[[], nn.Module], layers: str
) -> None:
    model, ids = built(make), torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    count = model.config.num_hidden_layers
    assert [name for name, _ in blocks(model)] == [f"{layers}.{i}" for i in range(count)]
    with torch.no_grad(), hookscope.capture(model, ":blocks") as cap:
        out = model(ids, output_hidden_states=True)
    first = FIRST.get(make, 1)
    assert len(out.hidden_states) == count + 1  # each layer's, and the embeddings or the last one normed
    for i in range(count - 1):
        torch.testing.assert_close(cap[f"{layers}.{i}"].output, out.hidden_states[i + first], rtol=0, atol=0)


def _grads(model: nn.Module, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    twin = copy.deepcopy(model).train()
    twin(ids).logits.square().mean().backward()
    return {n: p.grad.detach() for n, p in twin.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(("make", "layers"), FAMILIES, ids=IDS)
def test_watch_covers_every_parameter_fused_experts_included(make: Callable[[], nn.Module], layers: str) -> None:
    model, ids = built(make).train(), torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    grads = _grads(model, ids)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the weights stay the twin's
    fused = {n.rpartition(".")[0] for n, p in model.named_parameters() if p.dim() == 3 and "experts" in n}
    with contextlib.ExitStack() as stack:
        if fused:  # said once: module hooks see one tensor for all experts; watch adds a row per expert
            stack.enter_context(pytest.warns(CaptureWarning, match="hold fused expert parameters"))
        with hookscope.watch(model, opt, every=1) as w:
            opt.zero_grad()
            model(ids).logits.square().mean().backward()
            opt.step()
    modules = dict(model.named_modules())
    histories: dict[str, Any] = {site: h for site, h in w.histories().items() if site in modules}  # not per expert
    sites = sum(h["weight_norm"][-1] ** 2 for h in histories.values() if not math.isnan(h["weight_norm"][-1]))
    every = sum(p.detach().square().sum().item() for p in model.parameters())
    assert sites == pytest.approx(every, rel=1e-6)  # each parameter watched exactly once
    assert bool(fused) == (make is not mamba)
    for site in fused | {f"{layers}.0"}:
        if site not in histories:
            continue  # a container with no parameter of its own is not a site
        own = [n for n, _ in model.get_submodule(site).named_parameters(recurse=False)]
        want = math.sqrt(sum(grads[f"{site}.{n}"].square().sum().item() for n in own if f"{site}.{n}" in grads))
        assert histories[site]["grad_norm"][0] == pytest.approx(want, rel=1e-5), site
    assert fused <= set(histories)
