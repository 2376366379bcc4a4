"""``cam`` without a layer never reads a map whose channels are not on axis 1 as one: a channels-last
output ``(B, H, W, C)`` (Swin's final norm) is read in place, an attention's ``(B, heads, N, N)``
weights not at all. Oracles: each model's definition (its stem convolution's channels and stride, its
attention's head count), and the layer the old rule picked, shown to be one of those."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
import torchvision
from torch import Tensor, nn

import hookscope
from hookscope.core.capture import shapes_of
from hookscope.explain.layers import choose_layer


class PoolChannelsLast(nn.Module):
    """timm's Swin head: the mean over (H, W) of channels-last maps."""

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=(1, 2))


def timm_like_swin() -> nn.Module:
    """torchvision's Swin without the permute before its pool: its last 4-D output is the final norm's (B, H, W, C)."""
    torch.manual_seed(0)
    swin = torchvision.models.swin_transformer.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=[2, 2], num_classes=5
    )
    parts = OrderedDict(features=swin.features, norm=swin.norm, pool=PoolChannelsLast(), head=swin.head)
    return nn.Sequential(parts).eval()


class CrossAttention(nn.Module):
    """CrossViT's last attention: the class token alone asks, softmax weights (B, heads, 1, N) go
    through a Dropout module, and (B, 1, C) comes out: the last 4-D output of the model."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.wq, self.wkv = heads, nn.Linear(dim, dim), nn.Linear(dim, 2 * dim)
        self.attn_drop, self.proj = nn.Dropout(0.0), nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        q = self.wq(x[:, :1]).reshape(b, 1, self.heads, c // self.heads).transpose(1, 2)  # (B, h, 1, d)
        k, v = self.wkv(x).reshape(b, n, 2, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)  # (B, h, N, d)
        weights = self.attn_drop((q @ k.transpose(-2, -1) * (c // self.heads) ** -0.5).softmax(dim=-1))
        return self.proj((weights @ v).transpose(1, 2).reshape(b, 1, c))


class TinyCrossViT(nn.Module):
    def __init__(self, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, kernel_size=8, stride=8)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.norm1, self.attn, self.head = nn.LayerNorm(dim), CrossAttention(dim, heads), nn.Linear(dim, 4)

    def forward(self, x: Tensor) -> Tensor:
        tokens = self.patch(x).flatten(2).transpose(1, 2)  # (B, 16, dim)
        tokens = torch.cat([self.cls.expand(len(x), -1, -1), tokens], dim=1)
        return self.head(self.attn(self.norm1(tokens))[:, 0])


def last_4d(model: nn.Module, x: Tensor) -> str:
    """The old rule: the last call returning a 4-D floating output larger than 1x1 along its last two axes."""
    calls = sorted((c for n, r in shapes_of(model, x).items() if n for c in r.calls), key=lambda c: c.order)
    four = [c for c in calls if c.keys("output") and c.get("output").dim() == 4 and c.get("output")[0, 0].numel() > 1]
    return four[-1].site


def test_a_channels_last_norm_is_read_in_place_not_as_channels_first() -> None:
    model, x = timm_like_swin(), torch.randn(2, 3, 32, 32)
    assert last_4d(model, x) == "norm"  # (2, 4, 4, 32): read channels-first, it would be 4 maps of 4 x 32
    choice = choose_layer(model, x)
    assert (choice.layer, choice.words) == ("norm", "`norm`: the last spatial map (channels last)")
    with hookscope.capture(model, "norm", kinds=("output", "grad_output")) as cap:
        model(x)[:, 1].sum().backward()
    a, g = cap["norm"].output.permute(0, 3, 1, 2), cap["norm"].grad_output.permute(0, 3, 1, 2)  # (B, 32, 4, 4)
    by_hand = (g.mean(dim=(2, 3), keepdim=True) * a).sum(1).relu()  # Grad-CAM on the 4 x 4 grid
    heat = hookscope.cam(model, x, target=1)
    assert torch.equal(heat, hookscope.cam(model, x, target=1, select="norm"))  # what cam() reads without select=
    small = torch.nn.functional.interpolate(heat[:, None], size=(4, 4), mode="area")[:, 0]  # back on the grid
    for row in range(2):
        assert small[row].flatten().argmax() == by_hand[row].flatten().argmax()


def test_timm_swin_reads_its_final_norm_not_an_mlp_branch() -> None:
    """timm's Swin: the old pick was ``layers.1.blocks.1.drop_path2``, the MLP branch before the residual add."""
    swin = pytest.importorskip("timm.models.swin_transformer")
    torch.manual_seed(0)
    model = swin.SwinTransformer(img_size=32, patch_size=4, window_size=2, embed_dim=16, depths=(1, 2),
                                 num_heads=(1, 2), num_classes=5).eval()  # fmt: skip
    choice = choose_layer(model, torch.randn(2, 3, 32, 32))
    assert choice.layer == "norm" and "drop_path" not in choice.words


def test_an_attention_dropout_is_not_a_spatial_map() -> None:
    torch.manual_seed(0)
    model, x = TinyCrossViT().eval(), torch.randn(2, 3, 32, 32)
    assert last_4d(model, x) == "attn.attn_drop"  # (2, heads, 1, 17): attention weights, not a map
    choice = choose_layer(model, x)
    assert choice.layer == "norm1"  # the tokens the last attention reads
    assert "attn_drop" not in choice.words


def test_cnns_keep_their_choice() -> None:
    """Containers whose output concatenates branches (GoogLeNet's inception5b) stay choosable."""
    googlenet = torchvision.models.googlenet(aux_logits=False, init_weights=False).eval()
    assert choose_layer(googlenet, torch.randn(1, 3, 64, 64)).layer == "inception5b"


@pytest.mark.slow
def test_every_torchvision_classifier_gets_a_map_of_the_input() -> None:
    """Over torchvision's classifiers: the chosen output is a map whose grid grows with the input
    (224 -> 448: twice the side, the same channels), Swin's the permuted one, ViT's tokens."""
    for name in torchvision.models.list_models(module=torchvision.models):
        kwargs = {"init_weights": False} if name in ("googlenet", "inception_v3") else {}
        model = torchvision.models.get_model(name, **kwargs).eval()
        small, large = (torch.randn(1, 3, s, s) for s in ((299, 598) if name == "inception_v3" else (224, 448)))
        choice = choose_layer(model, small)
        if name.startswith("vit_"):
            assert choice.layer.endswith("ln_1"), name
            continue
        if name.startswith("maxvit"):
            continue  # its attention windows are fixed to 224 x 224 inputs
        shapes = [shapes_of(model, x)[choice.layer].calls[choice.call].get("output").shape for x in (small, large)]
        pooled = isinstance(model.get_submodule(choice.layer), nn.AdaptiveAvgPool2d)  # AlexNet, VGG: a fixed grid
        assert shapes[0][1] == shapes[1][1] and (pooled or shapes[1][2] >= 2 * shapes[0][2] - 1), (name, shapes)
        if name.startswith("swin"):
            assert choice.layer == "permute", name


def test_hand_written_models_a_unet_and_a_seq2seq() -> None:
    """The models people write themselves (tests/handwritten.py): on the U-Net, whose output is a mask,
    the default target (top-1 class) is refused naming ``target=callable``; with one, each image gets
    one map at the input's grid from a layer the target depends on. On the seq2seq, whose inputs are
    token ids, ``cam`` refuses in one line (no image); its gradients are what a callable target asks."""
    from hookscope.errors import OptionError, TargetError
    from tests import handwritten

    unet, x = handwritten.unet(), torch.randn(2, 3, 32, 32)
    with pytest.raises(TargetError, match=r"a class target needs a \(batch, classes\) output.*target=callable"):
        hookscope.cam(unet, x)
    for layer in ("bottleneck", "dec1"):
        heat = hookscope.cam(unet, x, target=lambda out: out.flatten(1).norm(dim=1), select=layer)
        assert heat.shape == (2, 32, 32) and bool((heat.flatten(1).amax(1) > 0).all()), layer
    model, src, tgt = handwritten.seq2seq(), torch.tensor([[1, 2, 3, 4]]), torch.tensor([[5, 6]])
    with pytest.raises(OptionError, match=r"cam\(\) needs an image batch"):
        hookscope.cam(model, src)
    with hookscope.capture(model, "transformer.encoder", kinds=("output", "grad_output")) as cap:
        model(src, tgt)[:, -1, 3].sum().backward()
    assert cap["transformer.encoder"].grad_output.shape == (1, 4, 16)
    assert cap["transformer.encoder"].grad_output.abs().sum() > 0  # the decoder reads the encoder's memory
