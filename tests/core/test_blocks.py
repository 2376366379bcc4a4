"""Selection at scale: ``:blocks`` is a model's repeated blocks, and patterns leave out the trivial
modules (Identity, padding) unless those are all they match. Oracles: the blocks written out by
hand from each architecture's definition."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from hookscope import zoo
from hookscope.core.blocks import blocks
from hookscope.core.select import BLOCKS, TRIVIAL, select_modules, trivial
from tests.models import LeNet


def names(pairs: list[tuple[str, nn.Module]]) -> list[str]:
    return [name for name, _ in pairs]


def test_blocks_of_four_architectures() -> None:
    resnet = torchvision.models.resnet18()
    assert names(blocks(resnet)) == [f"layer{s}.{b}" for s in range(1, 5) for b in range(2)]
    assert names(blocks(torchvision.models.mobilenet_v2())) == [f"features.{i}" for i in range(1, 18)]  # no stem, head
    vit = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=3, num_heads=2,
                                               hidden_dim=16, mlp_dim=32)  # fmt: skip
    assert names(blocks(vit)) == [f"encoder.layers.encoder_layer_{i}" for i in range(3)]
    assert names(blocks(zoo.efficientnet_lite0())) == [f"_blocks.{i}" for i in range(16)]
    assert names(select_modules(resnet, BLOCKS)) == names(blocks(resnet))


def test_the_repeated_unit_not_its_parts() -> None:
    """Oracle: each architecture's blocks as torchvision defines them (its stage and block lists)."""
    regnet = torchvision.models.regnet_y_400mf()
    depths = [len(stage) for stage in regnet.trunk_output]  # 1, 3, 6, 6
    expected = [f"trunk_output.block{s}.block{s}-{b}" for s, d in enumerate(depths, 1) for b in range(d)]
    assert names(blocks(regnet)) == expected and len(expected) == 16
    assert {type(m).__name__ for _, m in blocks(regnet)} == {"ResBottleneckBlock"}
    small = torchvision.models.mobilenet_v3_small()
    assert names(blocks(small)) == [f"features.{i}" for i in range(1, 12)]  # the 11 InvertedResiduals
    b0 = torchvision.models.efficientnet_b0()
    stages = [(i, len(b0.features[i])) for i in range(1, 8)]  # 1, 2, 2, 3, 3, 4, 1 MBConvs
    assert names(blocks(b0)) == [f"features.{i}.{b}" for i, d in stages for b in range(d)]
    googlenet = torchvision.models.googlenet(aux_logits=False, init_weights=False)
    inceptions = ["3a", "3b", "4a", "4b", "4c", "4d", "4e", "5a", "5b"]
    assert names(blocks(googlenet)) == [f"inception{i}" for i in inceptions]


@pytest.mark.parametrize("aux", [True, False])
def test_inception_v3_blocks_are_its_eleven_inception_blocks(aux: bool) -> None:
    """Oracle: torchvision's Inception3 (Mixed_5b ... Mixed_7c, of five classes), not its auxiliary
    classifier (a conv and a Linear), nor the stem's ``BasicConv2d``."""
    model = torchvision.models.inception_v3(init_weights=False, aux_logits=aux)
    mixed = ["5b", "5c", "5d", "6a", "6b", "6c", "6d", "6e", "7a", "7b", "7c"]
    assert names(blocks(model)) == [f"Mixed_{m}" for m in mixed]


def test_maxvit_blocks_are_its_layers_not_its_four_stages() -> None:
    """Oracle: torchvision's MaxViT-T definition, stages of 2, 2, 5 and 2 ``MaxVitLayer`` (``blocks.N``,
    the stages, are ``MaxVitBlock``s: named blocks, built as stages)."""
    model = torchvision.models.maxvit_t()
    depths = [len(stage.layers) for stage in model.blocks]
    assert depths == [2, 2, 5, 2]
    assert names(blocks(model)) == [f"blocks.{s}.layers.{i}" for s, d in enumerate(depths) for i in range(d)]
    assert {type(m).__name__ for _, m in blocks(model)} == {"MaxVitLayer"}


@pytest.mark.parametrize(
    ("name", "depths"),
    [("efficientnet_b0", [1, 2, 2, 3, 3, 4, 1]), ("mobilenetv3_large_100", [1, 2, 3, 4, 2, 3]),
     ("mobilenetv3_small_100", [1, 2, 3, 2, 3])],
)  # fmt: skip
def test_timm_efficientnet_and_mobilenetv3_blocks_start_at_blocks_0_0(name: str, depths: list[int]) -> None:
    """Oracle: timm's architecture definitions (their stages' depths; MobileNetV3's last stage is one
    1x1 convolution, not a block); the first stage's ``DepthwiseSeparableConv`` is a block too."""
    timm = pytest.importorskip("timm")
    model = timm.create_model(name, pretrained=False)
    assert names(blocks(model)) == [f"blocks.{s}.{b}" for s, depth in enumerate(depths) for b in range(depth)]
    assert type(dict(blocks(model))["blocks.0.0"]).__name__ == "DepthwiseSeparableConv"


def test_a_stage_of_one_block_is_not_missed() -> None:
    mnasnet = torchvision.models.mnasnet0_5()
    expected = [f"layers.{i}.{b}" for i in range(8, 14) for b in range(len(mnasnet.layers[i]))]
    assert [len(mnasnet.layers[i]) for i in range(8, 14)] == [3, 3, 3, 2, 4, 1]
    assert names(blocks(mnasnet)) == expected


def test_transformer_blocks_are_found_below_the_model() -> None:
    transformers = pytest.importorskip("transformers")
    bert = transformers.BertModel(
        transformers.BertConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=8)
    )
    assert names(blocks(bert)) == ["encoder.layer.0", "encoder.layer.1"]
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=16, n_layer=3, n_head=2))
    assert names(blocks(gpt2)) == ["transformer.h.0", "transformer.h.1", "transformer.h.2"]


def test_a_toy_stack_of_one_layer_blocks_is_its_blocks() -> None:
    stack = nn.Sequential(*(nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)), nn.Linear(4, 2))
    assert names(blocks(stack)) == ["0", "1", "2"]


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


@pytest.mark.slow
def test_every_torchvision_classifier_has_blocks_that_run_and_do_not_nest() -> None:
    """Over torchvision's classification models: blocks exist, none holds another, and each runs once or more."""
    for name in torchvision.models.list_models(module=torchvision.models):
        kwargs = {"init_weights": False} if name in ("googlenet", "inception_v3") else {}
        model = torchvision.models.get_model(name, **kwargs).eval()
        found = names(blocks(model))
        if name.startswith(("alexnet", "vgg")):
            assert found == [], name  # plain stacks of layers: no repeated unit
            continue
        assert len(found) >= 2, name
        assert not any(b.startswith(a + ".") for a in found for b in found), name
        ran: set[str] = set()
        hooks = [m.register_forward_hook(lambda m, i, o, n=n, ran=ran: ran.add(n)) for n, m in blocks(model)]
        size = 299 if name == "inception_v3" else 224
        with torch.no_grad():
            model(torch.randn(1, 3, size, size))
        for hook in hooks:
            hook.remove()
        assert ran == set(found), (name, sorted(set(found) - ran)[:3])


@pytest.mark.parametrize("layers", [1, 2])
def test_a_one_layer_nn_transformer_has_its_encoder_and_decoder_layers_as_blocks(layers: int) -> None:
    """Oracle: ``nn.Transformer``'s definition, ``encoder.layers`` and ``decoder.layers`` hold ``layers``
    layers each; with one, the layers are still the blocks (not the decoder layer's two attentions)."""
    model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=layers, num_decoder_layers=layers,
                           dim_feedforward=16, batch_first=True)  # fmt: skip
    expected = [f"{stack}.layers.{i}" for stack in ("encoder", "decoder") for i in range(layers)]
    assert names(blocks(model)) == expected
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 1)
    assert names(blocks(encoder)) == ["layers.0"]
    head = nn.Sequential(torchvision.models.resnet18(), nn.Linear(1000, 2))  # a backbone and a head
    assert names(blocks(head)) == [f"0.layer{s}.{b}" for s in range(1, 5) for b in range(2)]
