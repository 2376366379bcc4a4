"""The CAM driver: the right layer, the right gradients, no side effects; checked against Captum."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
import torchvision
from captum.attr import LayerAttribution, LayerGradCam
from torch import nn

import hookscope
from hookscope.errors import CaptureWarning
from hookscope.explain import cam as maths
from hookscope.explain.cam import CAM_METHODS, cam
from hookscope.explain.layers import pick_layer


class TinyCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(4, 5, 3, padding=1)
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(torch.relu(self.features(x))).flatten(1))


@pytest.fixture
def tiny() -> tuple[TinyCNN, torch.Tensor]:
    torch.manual_seed(0)
    return TinyCNN().double().eval(), torch.randn(2, 3, 8, 8, dtype=torch.float64)


def _oracle_layer(model: TinyCNN, x: torch.Tensor, target: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """features' output and d score / d output, by hand with autograd.grad."""
    act = model.features(x)
    logits = model.fc(model.pool(torch.relu(act)).flatten(1))
    score = logits.gather(1, torch.tensor(target)[:, None]).sum()
    (grad,) = torch.autograd.grad(score, act)
    return act.detach(), grad


@pytest.mark.parametrize("method", ["gradcam", "gradcam++", "xgradcam", "layercam"])
def test_gradient_methods_equal_their_maths_on_hand_computed_gradients(tiny, method) -> None:
    """The driver's map is the pure function of the layer's output and autograd's gradient."""
    model, x = tiny
    act, grad = _oracle_layer(model, x, [2, 0])
    fn = {"gradcam": maths.grad_cam, "gradcam++": maths.grad_cam_pp, "xgradcam": maths.xgrad_cam}.get(
        method, maths.layer_cam
    )
    expected = maths.normalize_maps(fn(act, grad).float(), size=(8, 8))
    signed = pytest.warns(CaptureWarning, match=r"of layer 'features' are negative")  # a conv, before its relu
    with signed if method in maths.SIGN_SENSITIVE else contextlib.nullcontext():
        torch.testing.assert_close(cam(model, x, method, [2, 0], select="features"), expected)


def test_score_cam_equals_a_hand_loop_over_masked_inputs(tiny) -> None:
    """Score-CAM: every channel's mask applied to the input, scored, softmaxed, batched or not."""
    model, x = tiny
    act = model.features(x).detach()
    masks = maths.score_cam_masks(act, size=(8, 8))
    with torch.no_grad():
        rows = [[model(x[b : b + 1] * masks[b, k])[0, 1].item() for k in range(5)] for b in range(2)]
    channel_scores = torch.tensor(rows, dtype=torch.float64)
    expected = maths.normalize_maps(maths.score_cam(act, channel_scores).float(), size=(8, 8))
    for batch_size in (1, 2, 32):
        torch.testing.assert_close(cam(model, x, "scorecam", 1, select="features", batch_size=batch_size), expected)


def test_eigen_cam_uses_only_activations(tiny) -> None:
    model, x = tiny
    expected = maths.normalize_maps(maths.eigen_cam(model.features(x).detach()).float(), size=(8, 8))
    torch.testing.assert_close(cam(model, x, "eigencam", select="features"), expected)


def test_targets_top1_callable_and_list(tiny) -> None:
    """None is each image's top-1 class; a callable scores the output itself."""
    model, x = tiny
    top1 = model(x).argmax(1).tolist()
    torch.testing.assert_close(
        cam(model, x, target=None, select="features"), cam(model, x, target=top1, select="features")
    )
    by_callable = cam(model, x, target=lambda out: out[:, 2], select="features")
    torch.testing.assert_close(by_callable, cam(model, x, target=2, select="features"))


def test_no_side_effects_on_the_model(tiny) -> None:
    """No param.grad, no flag change, no hook left, for every method."""
    model, x = tiny
    model.features[0].requires_grad_(False)
    for method in CAM_METHODS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CaptureWarning)  # 'features' ends in a conv: signed
            cam(model, x, method, 0, select="features")
    assert all(p.grad is None for p in model.parameters())
    assert not model.training
    assert not model.features[0].weight.requires_grad
    assert hookscope.find_hooks(model) == []


def test_cam_works_under_no_grad_inference_mode_and_an_inplace_first_layer(tiny) -> None:
    """The caller's grad mode does not matter, and a model that edits its input in place still works."""
    model, x = tiny
    expected = cam(model, x, "gradcam", 1, select="features")
    with torch.no_grad():
        torch.testing.assert_close(cam(model, x, "gradcam", 1, select="features"), expected)
    with torch.inference_mode():
        torch.testing.assert_close(cam(model, x, "gradcam", 1, select="features"), expected)
    inplace_first = nn.Sequential(nn.ReLU(inplace=True), model)
    torch.testing.assert_close(
        cam(inplace_first, x.relu(), "gradcam", 1, select="1.features"),
        cam(model, x.relu(), "gradcam", 1, select="features"),
    )


def test_pick_layer_is_the_last_spatial_output() -> None:
    """ResNet-18: layer4 (its output is the last map larger than 1x1, avgpool's is 1x1)."""
    model = torchvision.models.resnet18().eval()
    assert pick_layer(model, torch.randn(1, 3, 64, 64)) == ("layer4", 0)


def test_errors_are_one_line_and_helpful(tiny) -> None:
    model, x = tiny
    with pytest.raises(hookscope.HookscopeError, match=r"unknown CAM method 'gradcam\+'; methods are gradcam"):
        cam(model, x, "gradcam+")
    with pytest.raises(hookscope.HookscopeError, match=r"needs an image batch \(B, C, H, W\)"):
        cam(model, x[0])
    with pytest.raises(hookscope.HookscopeError, match=r"'features' ran 1 time\(s\).*call=3"):
        cam(model, x, select="features", call=3)
    with pytest.raises(hookscope.SelectionError, match=r"no module of Sequential returns a \(B, C, H, W\) map"):
        cam(nn.Sequential(nn.Flatten(), nn.Linear(3, 2)), torch.randn(1, 3, 1, 1))
    with pytest.raises(hookscope.HookscopeError, match=r"target 7 is not a class"):
        cam(model, x, target=7, select="features")


def test_grad_cam_matches_captum_layer_grad_cam_on_resnet18() -> None:
    """Captum's LayerGradCam on layer4 of a ResNet-18, scaled to [0, 1] at the layer's 3x3, upsampled
    and scaled again, in pytorch-grad-cam's order (scale_cam_image, resize, scale_cam_image)."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18().double().eval()
    x = torch.randn(2, 3, 96, 96, dtype=torch.float64)
    theirs = LayerGradCam(model, model.layer4).attribute(x, target=[3, 7], relu_attributions=True)

    def min_max(maps: torch.Tensor) -> torch.Tensor:
        low, high = maps.amin(dim=(2, 3), keepdim=True), maps.amax(dim=(2, 3), keepdim=True)
        return (maps - low) / (high - low)

    theirs = min_max(LayerAttribution.interpolate(min_max(theirs), (96, 96), interpolate_mode="bilinear"))[:, 0]
    ours = cam(model, x, "gradcam", [3, 7], select="layer4")
    torch.testing.assert_close(ours, theirs.float(), atol=1e-5, rtol=1e-5)


def test_vision_transformer_layers_work_through_the_token_grid() -> None:
    """torchvision's ViT: a block's (B, 1 + 16, C) tokens become a 4x4 map; Grad-CAM on it by hand.
    Its head starts at zero (every map would be zeros, with a warning), so it gets random weights;
    and the last block's patch tokens reach the class token through no attention (zero gradient),
    so the map is the first block's."""
    from torchvision.models.vision_transformer import VisionTransformer

    from hookscope.core.channels import tokens_to_grid

    torch.manual_seed(0)
    model = VisionTransformer(32, 8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=5)
    nn.init.normal_(model.heads.head.weight)
    model = model.double().eval()
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    block = model.encoder.layers.encoder_layer_0
    seen: list[torch.Tensor] = []
    handle = block.register_forward_hook(lambda m, a, out: seen.append(out))
    logits = model(x)
    handle.remove()
    (grad,) = torch.autograd.grad(logits[:, 4].sum(), seen[0])
    act = tokens_to_grid(seen[0].detach(), prefix=1)
    expected = maths.normalize_maps(maths.grad_cam(act, tokens_to_grid(grad, prefix=1)).float(), size=(32, 32))
    assert (expected.amax(dim=(1, 2)) == 1).all()
    torch.testing.assert_close(cam(model, x, "gradcam", 4, select="encoder.layers.encoder_layer_0"), expected)


def test_a_layer_changed_in_place_afterwards_gets_the_gradient_of_its_own_output(tiny) -> None:
    """cam() stops the backward pass at the layer only when its output is unchanged: features.0 is
    followed by ReLU(inplace=True), so it differentiates down to the input and still gets the
    gradient with respect to the conv's own (pre-ReLU) output."""
    model, x = tiny
    conv, rest = model.features[0], model.features[2]
    act = conv(x)
    logits = model.fc(model.pool(torch.relu(rest(torch.relu(act)))).flatten(1))
    (grad,) = torch.autograd.grad(logits[:, 1].sum(), act)  # out-of-place oracle
    expected = maths.normalize_maps(maths.grad_cam(act.detach(), grad).float(), size=(8, 8))
    torch.testing.assert_close(cam(model, x, "gradcam", 1, select="features.0"), expected)
    _, grad_last = _oracle_layer(model, x, [1, 1])
    act_last = model.features(x).detach()
    expected_last = maths.normalize_maps(maths.grad_cam(act_last, grad_last).float(), size=(8, 8))
    torch.testing.assert_close(cam(model, x, "gradcam", 1, select="features"), expected_last)


class TwiceConv(nn.Module):
    """One conv applied twice (a shared layer): cam() picks a call."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.fc = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(torch.tanh(self.conv(x)))
        return self.fc(h.mean(dim=(2, 3)))


@pytest.mark.parametrize("call", [0, -1])
def test_a_shared_layer_gets_the_gradient_of_the_chosen_call_and_no_warning(call: int) -> None:
    torch.manual_seed(0)
    model = TwiceConv().double().eval()
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    first = model.conv(x)
    second = model.conv(torch.tanh(first))
    score = model.fc(second.mean(dim=(2, 3)))[:, 1].sum()
    grads = torch.autograd.grad(score, [first, second])
    act, grad = ((first, grads[0]), (second, grads[1]))[call]
    expected = maths.normalize_maps(maths.grad_cam(act.detach(), grad).float(), size=(6, 6))
    torch.testing.assert_close(cam(model, x, "gradcam", 1, select="conv", call=call), expected)
