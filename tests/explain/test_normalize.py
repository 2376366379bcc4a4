"""Flat maps come out exactly 0 (a constant map, a span that is rounding, a magnitude that is ~0),
through normalize_maps and through cam(), and cam() says why a map is all zeros."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from hookscope.errors import CaptureWarning
from hookscope.explain.cam import cam
from hookscope.explain.normalize import FLAT, TINY, flat_maps, normalize_maps


def test_a_constant_map_is_zeros_at_any_size() -> None:
    maps = torch.full((2, 4, 4), 3.5)
    assert torch.equal(normalize_maps(maps), torch.zeros(2, 4, 4))
    assert torch.equal(normalize_maps(maps, size=(9, 7)), torch.zeros(2, 9, 7))


def test_a_span_of_rounding_is_flat_and_a_real_one_is_not() -> None:
    """0.1 + 1e-9 k: a span of 8e-9 on 0.1 is within FLAT; 0.1 + 1e-4 k is a signal."""
    rounding = torch.full((1, 3, 3), 0.1) + 1e-9 * torch.arange(9.0).reshape(1, 3, 3)
    spread = torch.full((1, 3, 3), 0.1) + 1e-4 * torch.arange(9.0).reshape(1, 3, 3)
    assert flat_maps(torch.cat([rounding, spread])).tolist() == [True, False]
    assert torch.equal(normalize_maps(rounding, size=(6, 6)), torch.zeros(1, 6, 6))
    assert normalize_maps(spread, size=(6, 6)).amax() == 1.0


def test_a_map_whose_magnitude_is_about_zero_is_flat() -> None:
    """A spread map at 1e-15 (its span is all of its magnitude) is flat; the same map at 1e-6 is not."""
    shape = torch.rand(1, 5, 5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(normalize_maps(shape * 1e-15, size=(10, 10)), torch.zeros(1, 10, 10))
    assert FLAT * 1e-15 < TINY
    torch.testing.assert_close(normalize_maps(shape * 1e-6), normalize_maps(shape))


def test_an_efficientnet_at_features_gives_zeros_with_a_warning() -> None:
    """torchvision's EfficientNet-B0, random weights: every raw Grad-CAM value at ``features`` is below
    1e-13 (by hand, from the layer's output and gradient), so the map is ~0: zeros, and a warning."""
    torch.manual_seed(0)
    model = torchvision.models.efficientnet_b0().eval()
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    seen: list[torch.Tensor] = []
    handle = model.features.register_forward_hook(lambda m, a, out: seen.append(out))
    logits = model(x)
    handle.remove()
    (grad,) = torch.autograd.grad(logits.gather(1, logits.argmax(1, keepdim=True)).sum(), seen[0])
    raw = (grad.mean(dim=(2, 3), keepdim=True) * seen[0]).sum(dim=1).relu()
    assert 0 < raw.max() < 1e-13
    with pytest.warns(CaptureWarning, match=r"image\(s\) 0, 1 at layer 'features' are all zeros: the raw map is flat"):
        heat = cam(model, x, "gradcam", select="features")
    assert torch.equal(heat, torch.zeros(2, 64, 64))


def _net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)
    )
    return net.double().eval()


def test_a_class_with_zero_weights_has_a_zero_gradient_and_says_so() -> None:
    net, x = _net(), torch.randn(2, 3, 6, 6, dtype=torch.float64)
    with torch.no_grad():
        net[4].weight[2] = 0
    with pytest.warns(CaptureWarning, match=r"image\(s\) 0, 1 at layer '1' .* gradient at that layer is zero"):
        heat = cam(net, x, "gradcam", target=2, select="1")
    assert torch.equal(heat, torch.zeros(2, 6, 6))


def test_only_the_images_with_nothing_to_show_are_named() -> None:
    """The layer is a ReLU (activations >= 0) before a global pool: Grad-CAM's weights for a class are
    its head row / 36. All negative for class 1: that map is <= 0 everywhere, zeros after the ReLU;
    all positive for class 0: that map shows something."""
    net, x = _net(), torch.randn(2, 3, 6, 6, dtype=torch.float64)
    with torch.no_grad():
        net[4].weight[0] = torch.tensor([1.0, 2.0, 3.0, 4.0])
        net[4].weight[1] = -net[4].weight[0]
    with pytest.warns(CaptureWarning, match=r"image\(s\) 1 at layer '1' are all zeros: the raw map is 0 everywhere"):
        heat = cam(net, x, "gradcam", target=[0, 1], select="1")
    assert heat[0].amax() == 1.0
    assert torch.equal(heat[1], torch.zeros(6, 6))


def test_no_warning_when_every_map_shows_something(recwarn: pytest.WarningsRecorder) -> None:
    net, x = _net(), torch.randn(2, 3, 6, 6, dtype=torch.float64)
    with torch.no_grad():
        net[4].weight[0] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    heat = cam(net, x, "gradcam", target=0, select="1")
    assert (heat.amax(dim=(1, 2)) == 1.0).all()
    assert not recwarn.list


def test_a_vision_transformer_whose_head_starts_at_zero_says_its_gradient_is_zero() -> None:
    """torchvision's ViT initialises its head to zeros: every class score is the bias, the gradient at
    any block is zero, and so is every map."""
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(32, 8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=5).eval()
    assert not model.heads.head.weight.any()
    with pytest.warns(CaptureWarning, match=r"encoder_layer_0' .* gradient at that layer is zero"):
        heat = cam(model, torch.randn(2, 3, 32, 32), "gradcam", 4, select="encoder.layers.encoder_layer_0")
    assert torch.equal(heat, torch.zeros(2, 32, 32))
