"""Attention rollout: torch's attention weights against softmax(QK^T / sqrt(d)) by hand, the rollout
against the product written out, the model's output untouched, and a full-size ViT-B/16."""

from __future__ import annotations

import math
from collections import OrderedDict

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.errors import CaptureWarning, OptionError, SelectionError
from hookscope.transformer.rollout import MultiheadWeights, rollout

torchvision = pytest.importorskip("torchvision")
LAYERS = ["encoder.layers.encoder_layer_0", "encoder.layers.encoder_layer_1"]


@pytest.fixture
def tiny_vit() -> nn.Module:
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32
    )
    for p in model.parameters():  # torchvision zero-initialises the head and some biases: make every weight count
        nn.init.normal_(p, std=0.5)
    return model.double().eval()


def _hand_weights(attn: nn.MultiheadAttention, tokens: Tensor) -> Tensor:
    """softmax(Q K^T / sqrt(d)) per head, from the module's packed in_proj weights: (B, heads, N, N)."""
    q, k, _ = (tokens @ attn.in_proj_weight.T + attn.in_proj_bias).chunk(3, dim=-1)  # (B, N, E) each
    batch, count, width = q.shape
    heads, d = attn.num_heads, width // attn.num_heads
    q = q.view(batch, count, heads, d).transpose(1, 2)
    k = k.view(batch, count, heads, d).transpose(1, 2)
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)


def _hand_inputs(model: nn.Module, x: Tensor) -> list[Tensor]:
    """What each block's attention reads: its ln_1 output."""
    with hookscope.capture(model, [f"{name}.ln_1" for name in LAYERS]) as cap, torch.no_grad():
        model(x)
    return [cap[f"{name}.ln_1"].output for name in LAYERS]


def test_weights_are_softmax_qk_and_the_output_is_untouched(tiny_vit: nn.Module) -> None:
    x = torch.randn(3, 3, 32, 32, dtype=torch.float64)
    with torch.no_grad():
        outside = tiny_vit(x)
    with MultiheadWeights(tiny_vit) as watch, torch.no_grad():
        inside = tiny_vit(x)
    assert torch.equal(inside, outside)  # the hook returns nothing: bit-identical
    assert [name for name, _ in watch.weights] == [f"{n}.self_attention" for n in LAYERS]
    blocks = [tiny_vit.get_submodule(f"{n}.self_attention") for n in LAYERS]
    for (_, got), attn, tokens in zip(watch.weights, blocks, _hand_inputs(tiny_vit, x), strict=True):
        assert got.shape == (3, 2, 17, 17)
        torch.testing.assert_close(got, _hand_weights(attn, tokens), rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(got.sum(-1), torch.ones(3, 2, 17, dtype=torch.float64))
    assert hookscope.find_hooks(tiny_vit) == []


def _hand_rollout(layers: list[Tensor], fuse: str, discard: float = 0.0) -> Tensor:
    """The product written out one image and one row at a time: (B, 4, 4) maps, max 1."""
    batch, _, count, _ = layers[0].shape
    maps = []
    for b in range(batch):
        joint = torch.eye(count, dtype=torch.float64)
        for w in layers:
            fused = {"mean": w[b].mean(0), "max": w[b].max(0).values, "min": w[b].min(0).values}[fuse].clone()
            for i in range(count):
                order = [j for j in fused[i].argsort().tolist() if j != 0]  # ascending, the class column kept
                fused[i, order[: int(count * discard)]] = 0.0
            step = fused + torch.eye(count, dtype=torch.float64)
            joint = (step / step.sum(1, keepdim=True)) @ joint
        heat = joint[0, 1:].reshape(4, 4)
        maps.append(heat / heat.max())
    return torch.stack(maps)


@pytest.mark.parametrize(("fuse", "discard"), [("mean", 0.0), ("max", 0.0), ("min", 0.0), ("mean", 0.5)])
def test_rollout_equals_the_hand_product(tiny_vit: nn.Module, fuse: str, discard: float) -> None:
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    blocks = [tiny_vit.get_submodule(f"{n}.self_attention") for n in LAYERS]
    with torch.no_grad():
        weights = [_hand_weights(attn, t) for attn, t in zip(blocks, _hand_inputs(tiny_vit, x), strict=True)]
    result = hookscope.attention_rollout(tiny_vit, x, head_fusion=fuse, discard_ratio=discard)  # type: ignore[arg-type]
    heat = result.maps
    assert heat.shape == (2, 4, 4)
    torch.testing.assert_close(heat, _hand_rollout(weights, fuse, discard), rtol=1e-9, atol=1e-12)
    assert heat.flatten(1).amax(1).tolist() == pytest.approx([1.0, 1.0])


def test_mean_rollout_of_one_layer_is_half_attention_half_identity() -> None:
    weights = torch.softmax(torch.randn(1, 3, 5, 5, dtype=torch.float64), dim=-1)
    expected = 0.5 * weights.mean(1) + 0.5 * torch.eye(5, dtype=torch.float64)  # Abnar & Zuidema's 0.5 W + 0.5 I
    torch.testing.assert_close(rollout([weights]), expected)


def test_vit_b_16_random_init() -> None:
    torch.manual_seed(0)
    model = torchvision.models.vit_b_16().eval()
    heat = hookscope.attention_rollout(model, torch.randn(1, 3, 224, 224)).maps
    assert heat.shape == (1, 14, 14)
    assert bool(heat.isfinite().all()) and heat.max().item() == pytest.approx(1.0) and heat.min().item() >= 0


def test_errors_say_what_to_pass(tiny_vit: nn.Module) -> None:
    x = torch.randn(1, 3, 32, 32, dtype=torch.float64)
    with pytest.raises(OptionError, match="head_fusion='median' is not one of mean, max, min"):
        hookscope.attention_rollout(tiny_vit, x, head_fusion="median")  # type: ignore[arg-type]
    with pytest.raises(OptionError, match=r"discard_ratio must be in \[0, 1\)"):
        hookscope.attention_rollout(tiny_vit, x, discard_ratio=1.0)
    with pytest.raises(SelectionError, match=r"has no nn\.MultiheadAttention module"):
        hookscope.attention_rollout(nn.Sequential(nn.Linear(2, 2)), x)
    with pytest.raises(SelectionError, match=r"has no nn\.MultiheadAttention module"):
        MultiheadWeights(tiny_vit, "encoder.ln")


def test_the_result_holds_the_rollout_and_draws_it(tiny_vit: nn.Module) -> None:
    x = torch.randn(3, 3, 32, 32, dtype=torch.float64)
    result = hookscope.attention_rollout(tiny_vit, x)
    with MultiheadWeights(tiny_vit) as watch, torch.no_grad():
        tiny_vit(x)
    joint = rollout([w for _, w in watch.weights])  # the functions the old return value was made of
    heat = joint[:, 0, 1:].reshape(3, 4, 4)
    torch.testing.assert_close(result.maps, heat / heat.flatten(1).amax(1)[:, None, None], rtol=0, atol=0)
    torch.testing.assert_close(result.joint, joint, rtol=0, atol=0)
    assert result.layers == [f"{name}.self_attention" for name in LAYERS]
    lines = result.table().splitlines()
    assert lines[0].split()[:2] == ["image", "grid"] and len(lines) == 4
    peak = int(result.maps[1].flatten().argmax())
    assert f"({peak // 4}, {peak % 4})" in lines[2] and lines[2].split()[-1] == f"{float(result.maps[1].mean()):.3f}"
    tiles = result.plot()
    assert tiles.mode == "RGB" and tiles.width > tiles.height  # three tiles side by side
    photo = torch.rand(3, 32, 32)
    assert result.plot(photo, batch=2).size == (32, 32)
    assert result.plot(photo, batch=2).tobytes() == hookscope.overlay(photo, result.maps[2]).tobytes()
    page = result._repr_html_()
    assert page is not None and "data:image/png;base64," in page and "peak patch" in page


def test_layers_is_the_old_name_of_select(tiny_vit: nn.Module) -> None:
    x = torch.randn(1, 3, 32, 32, dtype=torch.float64)
    one = f"{LAYERS[1]}.self_attention"
    new = hookscope.attention_rollout(tiny_vit, x, select=one)
    with pytest.warns(DeprecationWarning, match=r"attention_rollout\(layers=...\) is deprecated.*select="):
        old = hookscope.attention_rollout(tiny_vit, x, layers=one)
    assert new.layers == old.layers == [one]
    torch.testing.assert_close(new.maps, old.maps, rtol=0, atol=0)


def test_a_selector_of_blocks_keeps_the_attention_inside_them(tiny_vit: nn.Module) -> None:
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    every = hookscope.attention_rollout(tiny_vit, x)
    blocks = hookscope.attention_rollout(tiny_vit, x, select=":blocks")  # the encoder layers, not their attention
    last = hookscope.attention_rollout(tiny_vit, x, select=LAYERS[1])
    assert blocks.layers == every.layers and last.layers == [f"{LAYERS[1]}.self_attention"]
    torch.testing.assert_close(blocks.maps, every.maps, rtol=0, atol=0)


def _hybrid(vit: nn.Module) -> nn.Module:
    """The tiny ViT with a Mamba mixer between its two attention blocks: softmax and linear layers interleaved."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.mamba.modeling_mamba import MambaMixer

    config = transformers.MambaConfig(hidden_size=16, state_size=4, expand=2, conv_kernel=3, time_step_rank=4)
    blocks = dict(vit.encoder.layers.named_children())
    mixer = MambaMixer(config, layer_idx=0).double().eval()
    vit.encoder.layers = nn.Sequential(OrderedDict([("encoder_layer_0", blocks["encoder_layer_0"]), ("mamba", mixer),
                                                    ("encoder_layer_1", blocks["encoder_layer_1"])]))  # fmt: skip
    return vit


def test_rollout_refuses_linear_attention_layers_by_name(tiny_vit: nn.Module) -> None:
    model, x = _hybrid(tiny_vit), torch.randn(2, 3, 32, 32, dtype=torch.float64)
    with pytest.raises(SelectionError, match=r"cannot roll out encoder\.layers\.mamba \(selective scan\): linear"):
        hookscope.attention_rollout(model, x, select="encoder.layers.mamba")
    with pytest.raises(SelectionError, match=r"cannot roll out encoder\.layers\.mamba \(selective scan\)"):
        hookscope.attention_rollout(model, x, select="encoder.layers")  # a selection holding one
    with pytest.raises(SelectionError, match=r"also mixes tokens in linear-attention layers \(encoder\.layers\.mamba"):
        hookscope.attention_rollout(model, x)  # a hybrid: the softmax layers alone only when asked by name


def test_rollout_of_a_hybrid_s_attention_modules_names_the_linear_layers_left_out(tiny_vit: nn.Module) -> None:
    model, x = _hybrid(tiny_vit), torch.randn(2, 3, 32, 32, dtype=torch.float64)
    with pytest.warns(CaptureWarning, match=r"leaves out the token mixing of the linear-attention layers encoder\."):
        result = hookscope.attention_rollout(model, x, select=nn.MultiheadAttention)
    with MultiheadWeights(model) as watch, torch.no_grad():
        model(x)
    torch.testing.assert_close(result.joint, rollout([w for _, w in watch.weights]))
    assert result.layers == [f"{n}.self_attention" for n in LAYERS]
