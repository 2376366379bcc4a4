"""Layers cam() reads: a 1x1 map comes out flat, signed layers warn for Grad-CAM++ and XGrad-CAM,
and a layer that returns several tensors is read at a key."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchvision
from torch import nn

from hookscope.errors import CaptureWarning, OptionError
from hookscope.explain import cam as maths
from hookscope.explain.cam import CAM_METHODS, SIGN_SENSITIVE, cam


@pytest.mark.parametrize("method", CAM_METHODS)
def test_a_1x1_layer_gives_a_flat_map(method: str) -> None:
    """ResNet-18 at 32x32: layer4 is 1x1, so every map is flat, all zeros (as pytorch-grad-cam's),
    with a warning that says so."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    x = torch.randn(2, 3, 32, 32)
    with pytest.warns(CaptureWarning, match=r"image\(s\) 0, 1 at layer 'layer4' are all zeros: the layer is 1x1"):
        heat = cam(model, x, method, select="layer4", batch_size=512)
    assert torch.equal(heat, torch.zeros(2, 32, 32))


def test_normalize_maps_scales_at_the_layer_size_resizes_and_scales_again() -> None:
    """By hand. [0, 4, 1] scales to [0, 1, 0.25]; bilinear 3 -> 6 (align_corners=False) samples it at
    0, 0.25, 0.75, 1.25, 1.75, 2 (clamped): [0, 0.25, 0.75, 0.8125, 0.4375, 0.25], whose max 0.8125 =
    13/16 the second scaling brings to 1. Resizing first would put a 1 at 1.25. [1, 3] -> [0, 1] ->
    [0, 0.25, 0.75, 1] already spans [0, 1]."""
    out = maths.normalize_maps(torch.tensor([[[0.0, 4.0, 1.0]]]), size=(1, 6))
    torch.testing.assert_close(out, torch.tensor([[[0.0, 4.0, 12.0, 13.0, 7.0, 4.0]]]) / 13)
    out = maths.normalize_maps(torch.tensor([[[1.0, 3.0]]]), size=(1, 4))
    torch.testing.assert_close(out, torch.tensor([[[0.0, 0.25, 0.75, 1.0]]]))


def test_a_map_flat_up_to_rounding_is_flat() -> None:
    """max - min within FLAT of the largest value is rounding: zeros; a real spread is scaled."""
    rounding = torch.full((1, 3, 3), 0.1) + torch.tensor(1e-9) * torch.arange(9.0).reshape(1, 3, 3)
    assert torch.equal(maths.normalize_maps(rounding, size=(6, 6)), torch.zeros(1, 6, 6))
    spread = torch.full((1, 3, 3), 0.1) + torch.tensor(1e-4) * torch.arange(9.0).reshape(1, 3, 3)
    assert maths.normalize_maps(spread).max() == 1.0


# -- signed layers ---------------------------------------------------------------------------------


def _small_net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3),
    )  # fmt: skip
    return net.double().eval()


@pytest.mark.parametrize("method", SIGN_SENSITIVE)
def test_a_conv_before_its_activation_warns_once_and_names_the_activation(method: str) -> None:
    net, x = _small_net(), torch.randn(2, 3, 8, 8, dtype=torch.float64)
    share = float((net[:3](x) < 0).double().mean())  # the conv's own output, by hand
    assert share > 0.05
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cam(net, x, method, 1, select="2")
    assert len(seen) == 1 and seen[0].category is CaptureWarning
    message = str(seen[0].message)
    assert f"{method} assumes non-negative activations, but {share:.0%} of those of layer '2'" in message
    assert "explain the activation after it, select='3'" in message


@pytest.mark.parametrize("method", CAM_METHODS)
def test_no_warning_after_the_relu_nor_for_methods_that_do_not_divide_by_the_sum(method: str) -> None:
    net, x = _small_net(), torch.randn(2, 3, 8, 8, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cam(net, x, method, 1, select="3")
        if method not in SIGN_SENSITIVE:
            cam(net, x, method, 1, select="2")
    assert [str(w.message) for w in seen] == []


def test_a_functional_activation_is_not_named() -> None:
    """Nothing runs as a module after the conv but the pool: the message says what to look for."""

    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))

    torch.manual_seed(0)
    with pytest.warns(CaptureWarning, match=r"layer 'conv' are negative.*explain the activation that follows it"):
        cam(Functional().eval(), torch.randn(1, 3, 6, 6), "xgradcam", 0, select="conv")


# -- a layer that returns several tensors ---------------------------------------------------------


class Pair(nn.Module):
    """A layer that returns two maps; the model uses both."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.a(x), self.b(x)


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pair = Pair()
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.pair(x)
        return self.fc(torch.cat([a.relu().mean(dim=(2, 3)), torch.tanh(b).mean(dim=(2, 3))], dim=1))


def test_a_layer_with_two_outputs_is_read_at_its_key() -> None:
    """Oracle: each of the pair's tensors and autograd's gradient with respect to it, by hand."""
    torch.manual_seed(0)
    model, x = TwoHeads().double().eval(), torch.randn(2, 3, 6, 6, dtype=torch.float64)
    a, b = model.pair(x)
    score = model.fc(torch.cat([a.relu().mean(dim=(2, 3)), torch.tanh(b).mean(dim=(2, 3))], dim=1))[:, 2].sum()
    grads = torch.autograd.grad(score, [a, b])
    expected = [maths.normalize_maps(maths.grad_cam(t.detach(), g).float()) for t, g in zip((a, b), grads, strict=True)]
    noted = r"layer 'pair' holds 2 tensors; using the first, out\[0\] \(others: out\[1\]\)"
    with pytest.warns(CaptureWarning, match=noted):
        torch.testing.assert_close(cam(model, x, "gradcam", 2, select="pair"), expected[0])
    torch.testing.assert_close(cam(model, x, "gradcam", 2, select="pair", key="out[1]"), expected[1])
    torch.testing.assert_close(cam(model, x, "gradcam", 2, select="pair", key="1"), expected[1])
    unknown = r"layer 'pair' has no tensor at key='out\[2\]'; its keys are out\[0\], out\[1\]"
    with pytest.raises(OptionError, match=unknown):
        cam(model, x, "gradcam", 2, select="pair", key="out[2]")


def test_score_cam_tells_its_progress_after_each_forward_pass() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 10, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(10, 4)).eval()
    x = torch.randn(2, 3, 12, 12)
    told: list[tuple[str, int, int]] = []
    heat = cam(net, x, "scorecam", target=1, select="1", batch_size=4, progress=lambda *t: told.append(t))
    chunks = 3  # 10 channels, 4 masked copies at a time: 4 + 4 + 2
    assert told == [("scorecam", done, 2 * chunks) for done in range(2 * chunks + 1)]
    assert torch.equal(heat, cam(net, x, "scorecam", target=1, select="1", batch_size=10))  # batching changes nothing
