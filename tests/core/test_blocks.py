"""Selection at scale: ``:blocks`` is a model's repeated blocks, and patterns leave out the trivial
modules (Identity, padding) unless those are all they match. Oracles: the blocks written out by
hand from each architecture's definition."""

from __future__ import annotations

import torch
import torchvision
from torch import nn

from hookscope import zoo
from hookscope.core.select import BLOCKS, TRIVIAL, blocks, select_modules, trivial
from tests.models import LeNet


def names(pairs: list[tuple[str, nn.Module]]) -> list[str]:
    return [name for name, _ in pairs]


def test_blocks_of_four_architectures() -> None:
    resnet = torchvision.models.resnet18()
    assert names(blocks(resnet)) == [f"layer{s}.{b}" for s in range(1, 5) for b in range(2)]
    assert names(blocks(torchvision.models.mobilenet_v2())) == [f"features.{i}" for i in range(19)]
    vit = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=3, num_heads=2,
                                               hidden_dim=16, mlp_dim=32)  # fmt: skip
    assert names(blocks(vit)) == [f"encoder.layers.encoder_layer_{i}" for i in range(3)]
    assert names(blocks(zoo.efficientnet_lite0())) == [f"_blocks.{i}" for i in range(16)]
    assert names(select_modules(resnet, BLOCKS)) == names(blocks(resnet))


def test_a_model_without_blocks_selects_its_leaves() -> None:
    lenet = LeNet()
    assert blocks(lenet) == []
    assert select_modules(lenet, BLOCKS) == select_modules(lenet)


def test_patterns_leave_out_identity_and_padding_unless_that_is_all_they_match() -> None:
    model = zoo.efficientnet_lite0()
    everything = [(n, m) for n, m in model.named_modules() if n.startswith("_blocks.")]
    padding = {n for n, m in model.named_modules() if trivial(m)}
    assert len(padding) == 49 and all(n.endswith("static_padding") for n in padding)  # EfficientNet's own Identity
    picked = names(select_modules(model, "_blocks.*"))
    assert picked == [n for n, m in everything if n not in padding]  # 173 modules before, the padding among them
    assert set(names(select_modules(model, "*.static_padding"))) == padding  # asked for: kept
    one = "_blocks.1._depthwise_conv.static_padding"
    assert names(select_modules(model, one)) == [one]
    assert padding <= set(names(select_modules(model)))  # None is every leaf, as asked
    assert names(select_modules(nn.Sequential(nn.Identity(), nn.ReLU()), "*")) == ["1"]
    assert torch.nn.ZeroPad2d in TRIVIAL and nn.Identity in TRIVIAL
