"""hookscope.linear_attention on tiny random GatedDeltaNet (Qwen3-Next, Qwen3.5), Mamba and Mamba2 models.

The oracles are the models' own tensors: the layer's output (computed by transformers' chunked
delta rule or its sequential scan) rebuilt from the implied mixing matrix, the gates the layer
passes to its kernel function, and the recurrent state the model's own cache holds after each prefix.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.nn import functional as F

import hookscope
from hookscope.errors import CaptureError, CaptureWarning, NotCapturedError
from hookscope.transformer import readers
from hookscope.transformer.recurrence import (
    delta_rule,
    delta_rule_mixing,
    duality_mixing,
    duality_scan,
    scan_mixing,
    selective_scan,
)

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()  # the "falling back to torch" lines: the path tested here

SMALL = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "linear_num_key_heads": 2,
         "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
         "linear_conv_kernel_dim": 3, "layer_types": ["linear_attention", "full_attention"]}  # fmt: skip


def _louder(model: nn.Module) -> nn.Module:
    """The linear layers' weights drawn with std 0.3, not 0.02: outputs of order 1, so 1e-5 means something."""
    with torch.no_grad():
        for layer in model.model.layers:
            for weight in (p for p in getattr(layer, "linear_attn", nn.Module()).parameters() if p.dim() > 1):
                weight.normal_(0, 0.3)
    return model.eval()


def qwen3_next() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.Qwen3NextConfig(**SMALL, num_experts=0, mlp_only_layers=[0, 1])
    return _louder(transformers.Qwen3NextForCausalLM(config))


def qwen3_5() -> nn.Module:
    torch.manual_seed(0)
    return _louder(transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(**SMALL)))


def mamba() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2,
                                      conv_kernel=3, time_step_rank=4)  # fmt: skip
    model = transformers.MambaForCausalLM(config).eval()
    with torch.no_grad():  # steps large enough that the mixing, not the D x skip, carries the output
        for layer in model.backbone.layers:
            layer.mixer.dt_proj.bias.fill_(0.5)
            for part in (layer.mixer.in_proj, layer.mixer.x_proj, layer.mixer.out_proj):
                part.weight.normal_(0, 0.3)
    return model


def mamba2() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.Mamba2Config(vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2,
                                       conv_kernel=3, num_heads=4, head_dim=8, n_groups=2, chunk_size=4)  # fmt: skip
    model = transformers.Mamba2ForCausalLM(config).eval()
    with torch.no_grad():  # as mamba(): the scan, not the skip, carries the output
        for layer in model.backbone.layers:
            layer.mixer.dt_bias.fill_(0.5)
            for part in (layer.mixer.in_proj, layer.mixer.out_proj):
                part.weight.normal_(0, 0.3)
    return model


def _inputs(model: nn.Module) -> Tensor:
    return torch.randint(0, model.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(1))


def _called_with(model: nn.Module, module: nn.Module, ids: Tensor) -> Tensor:
    seen: list[Tensor] = []
    handle = module.register_forward_pre_hook(
        lambda _, args, kwargs: seen.append(args[0] if args else kwargs["hidden_states"]), with_kwargs=True
    )
    with torch.no_grad():
        model(ids)
    handle.remove()
    return seen[0]


@pytest.mark.parametrize("build", [qwen3_next, qwen3_5], ids=["qwen3_next", "qwen3_5"])
def test_delta_rule_mixing_applied_as_the_layer_gives_its_output(build: Any) -> None:
    model = build()
    ids = _inputs(model)
    lin = hookscope.linear_attention(model, ids)
    assert lin.layers == ["model.layers.0.linear_attn"]
    call, module = lin.layer(0), model.model.layers[0].linear_attn
    mixing = lin.mixing(0)  # (B, H, T, T)
    assert mixing.shape == (2, 4, 6, 6) and torch.all(mixing.triu(1) == 0)
    hidden = _called_with(model, module, ids)
    with torch.no_grad():
        if hasattr(module, "in_proj_qkvz"):
            z = module.fix_query_key_value_ordering(module.in_proj_qkvz(hidden), module.in_proj_ba(hidden))[3]
        else:
            z = module.in_proj_z(hidden)
        core = (mixing @ call.values).transpose(1, 2).reshape(-1, 8)  # (B T H, dv), as the layer's norm takes it
        rebuilt = module.out_proj(module.norm(core, z.reshape(-1, 8)).reshape(2, 6, -1))
    torch.testing.assert_close(rebuilt, call.output, atol=1e-5, rtol=1e-4)
    assert call.output.abs().max() > 0.5  # the output is not trivially small


def test_delta_rule_gates_are_the_ones_the_layer_passes_its_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    model = qwen3_next()
    modeling = sys.modules[type(model).__module__]
    passed: dict[str, Tensor] = {}
    original = modeling.torch_chunk_gated_delta_rule

    def spy(query: Tensor, key: Tensor, value: Tensor, g: Tensor, beta: Tensor, **kwargs: Any) -> Any:
        passed.update(g=g, beta=beta)
        return original(query, key, value, g=g, beta=beta, **kwargs)

    monkeypatch.setattr(modeling, "torch_chunk_gated_delta_rule", spy)
    call = hookscope.linear_attention(model, _inputs(model)).layer("model.layers.0.linear_attn")
    torch.testing.assert_close(call.gates["g"], passed["g"].transpose(1, 2))  # (B, H, T)
    torch.testing.assert_close(call.gates["beta"], passed["beta"].transpose(1, 2))
    torch.testing.assert_close(call.decay, passed["g"].transpose(1, 2).exp())


@pytest.mark.parametrize("build", [qwen3_next, mamba, mamba2], ids=["qwen3_next", "mamba", "mamba2"])
def test_state_norms_are_the_norms_of_the_models_own_cached_state(build: Any) -> None:
    model = build()
    ids = _inputs(model)
    lin = hookscope.linear_attention(model, ids)
    call = lin.layer(0)
    for t in range(ids.shape[1]):  # the model's own recurrent state after the prefix ids[:, :t + 1]
        with torch.no_grad():
            cache = model(ids[:, : t + 1], use_cache=True)
        cache = getattr(cache, "past_key_values", None) or cache.cache
        state = cache.get_recurrent_state(0, state_idx=0)  # (B, H, dk, dv) or Mamba's (B, D, N)
        expected = state.flatten(2).norm(dim=-1) if state.dim() == 4 else state.norm(dim=-1)  # Mamba2: (B, H, P, N)
        torch.testing.assert_close(call.state_norms[..., t], expected, atol=1e-5, rtol=1e-4)


def test_mamba_mixing_applied_as_the_layer_gives_its_output() -> None:
    model = mamba()
    ids = _inputs(model)
    lin = hookscope.linear_attention(model, ids)
    assert lin.layers == ["backbone.layers.0.mixer", "backbone.layers.1.mixer"]
    for index, layer in enumerate(model.backbone.layers):
        call, module = lin.layer(index), layer.mixer
        hidden = _called_with(model, module, ids)
        with torch.no_grad():
            gate = module.in_proj(hidden).transpose(1, 2).chunk(2, dim=1)[1]
            scanned = (lin.mixing(index) @ call.values[..., None])[..., 0] + module.D[None, :, None] * call.values
            rebuilt = module.out_proj((scanned * F.silu(gate)).transpose(1, 2))
            skip_only = module.out_proj((module.D[None, :, None] * call.values * F.silu(gate)).transpose(1, 2))
        torch.testing.assert_close(rebuilt, call.output, atol=1e-5, rtol=1e-4)
        assert (skip_only - call.output).abs().max() > 0.1  # the mixing carries a real part of the output
    assert set(lin.layer(0).gates) == {"dt", "A", "B", "C"}


def test_mamba2_mixing_applied_as_the_layer_gives_its_output() -> None:
    model = mamba2()
    ids = _inputs(model)
    lin = hookscope.linear_attention(model, ids)
    call, module = lin.layer(0), model.backbone.layers[0].mixer
    assert call.kind == "state space duality" and lin.mixing(0).shape == (2, 4, 6, 6)
    hidden = _called_with(model, module, ids)
    with torch.no_grad():
        gate = module.in_proj(hidden)[..., : module.intermediate_size]
        scanned = lin.mixing(0) @ call.values + module.D[None, :, None, None] * call.values  # (B, H, T, P)
        rebuilt = module.out_proj(module.norm(scanned.transpose(1, 2).reshape(2, 6, -1), gate))
        skipped = module.out_proj(module.norm((module.D[None, :, None, None] * call.values).transpose(1, 2)
                                              .reshape(2, 6, -1), gate))  # fmt: skip
    torch.testing.assert_close(rebuilt, call.output, atol=1e-5, rtol=1e-4)
    assert (skipped - call.output).abs().max() > 0.1


def test_the_recurrences_match_their_mixing_matrices_and_a_hand_run() -> None:
    torch.manual_seed(3)
    batch, heads, length, dk, dv = 1, 2, 5, 3, 2
    q, k, v = torch.randn(batch, heads, length, dk), torch.randn(batch, heads, length, dk), torch.randn(1, 2, 5, dv)
    g, beta = -torch.rand(batch, heads, length), torch.rand(batch, heads, length)
    outputs, norms = delta_rule(q, k, v, g, beta)
    torch.testing.assert_close(delta_rule_mixing(q, k, g, beta) @ v, outputs)
    state = torch.zeros(dk, dv)  # head 1 by hand, in the paper's form
    for t in range(length):
        kt = k[0, 1, t]
        state = g[0, 1, t].exp() * (torch.eye(dk) - beta[0, 1, t] * torch.outer(kt, kt)) @ state
        state = state + beta[0, 1, t] * torch.outer(kt, v[0, 1, t])
        torch.testing.assert_close(norms[0, 1, t], state.norm())
    x, dt, a = torch.randn(1, 3, length), torch.rand(1, 3, length), -torch.rand(3, 4)
    b, c = torch.randn(1, length, 4), torch.randn(1, length, 4)
    scanned, _ = selective_scan(x, dt, a, b, c)
    torch.testing.assert_close((scan_mixing(dt, a, b, c) @ x[..., None])[..., 0], scanned)
    x, dt, a = torch.randn(1, 2, length, 3), torch.rand(1, 2, length), -torch.rand(2)
    b, c = torch.randn(1, 2, length, 4), torch.randn(1, 2, length, 4)
    scanned, norms = duality_scan(x, dt, a, b, c)
    torch.testing.assert_close(duality_mixing(dt, a, b, c) @ x, scanned)
    state = torch.zeros(3, 4)  # head 0 by hand
    for t in range(length):
        state = (dt[0, 0, t] * a[0]).exp() * state + dt[0, 0, t] * torch.outer(x[0, 0, t], b[0, 0, t])
        torch.testing.assert_close(norms[0, 0, t], state.norm())


def test_selection_table_and_plot() -> None:
    model = qwen3_next()
    lin = hookscope.linear_attention(model, _inputs(model), select="model.layers.0")
    lines = lin.table().splitlines()
    assert lines[0].split()[:3] == ["layer", "kind", "heads"]
    assert lines[1].startswith("model.layers.0.linear_attn  gated delta rule")
    assert lin.plot().size[0] > 100
    assert "Linear attention" in lin._repr_html_()
    with pytest.raises(NotCapturedError, match=r"no linear-attention layer ran at 'model\.layers\.1'"):
        lin.layer("model.layers.1")
    with pytest.raises(CaptureError, match=r"has no linear-attention layer under select='model\.layers\.1'"):
        hookscope.linear_attention(model, _inputs(model), select="model.layers.1")


def test_a_fused_kernel_package_is_named_with_the_modules_it_bypasses(monkeypatch: pytest.MonkeyPatch) -> None:
    model = mamba().train()
    monkeypatch.setattr(readers, "installed", lambda package: package == "mamba_ssm")  # a stand-in: CUDA-only
    with pytest.warns(CaptureWarning) as caught:
        lin = hookscope.linear_attention(model, _inputs(model))
    said = [str(w.message) for w in caught]
    assert said == lin.remarks and len(said) == 2
    assert said[0].startswith(
        "backbone.layers.0.mixer (MambaMixer) runs mamba_ssm's fused kernel in training mode: "
        "backbone.layers.0.mixer.x_proj, backbone.layers.0.mixer.out_proj run inside it as functions"
    )
    model.eval()  # in eval mode the kernel path calls x_proj and out_proj as modules: nothing to say
    assert hookscope.linear_attention(model, _inputs(model)).remarks == []


@pytest.mark.parametrize("build", [qwen3_next, mamba], ids=["qwen3_next", "mamba"])
def test_left_padding_leaves_the_state_at_zero_and_the_rest_as_the_sequence_alone(build: Any) -> None:
    model = build()
    ids = _inputs(model)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # the second sequence is left-padded by two tokens
    padded = hookscope.linear_attention(model, {"input_ids": ids, "attention_mask": mask}).layer(0)
    alone = hookscope.linear_attention(model, ids[1:, 2:]).layer(0)  # the first layer sees embeddings only
    assert torch.all(padded.state_norms[1, :, :2] == 0)
    torch.testing.assert_close(padded.state_norms[1:, :, 2:], alone.state_norms, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(padded.mixing[1:, :, 2:, 2:], alone.mixing, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("build", [qwen3_next, mamba, mamba2], ids=["qwen3_next", "mamba", "mamba2"])
def test_capture_of_the_layers_outputs_and_gradients_works_on_the_torch_path(build: Any) -> None:
    model = build()
    ids = _inputs(model)
    name = hookscope.linear_attention(model, ids).layers[0]
    layer = model.get_submodule(name)
    kept: list[Tensor] = []
    handle = layer.register_forward_hook(lambda _, __, out: kept.append(out))
    with hookscope.capture(model, name, kinds=("output", "grad_output")) as cap:
        model(ids).logits.square().sum().backward()
    score = model(ids).logits.square().sum()  # the oracle: autograd through a fresh pass's layer output
    handle.remove()
    (grad,) = torch.autograd.grad(score, kept[-1])
    torch.testing.assert_close(cap[name].output, kept[-1].detach())
    torch.testing.assert_close(cap[name].grad_output, grad)
