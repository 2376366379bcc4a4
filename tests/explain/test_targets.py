"""Targets and outputs for cam() and attribute(): a 0-dim tensor target (Captum's meaning), and
``output=KEY`` for a model that returns several tensors."""

from __future__ import annotations

import warnings

import pytest
import torch
from captum.attr import LayerAttribution, LayerGradCam, Saliency
from torch import Tensor, nn

from hookscope.errors import CaptureWarning, OptionError, TargetError
from hookscope.explain.attribute import attribute
from hookscope.explain.cam import cam
from hookscope.explain.targets import call_target, class_indices, top_classes
from tests.models import resnet18_random_bn


@pytest.fixture(scope="module")
def resnet() -> nn.Module:
    """resnet18 with random BatchNorm statistics, so that class 5's Grad-CAM maps are not all zero."""
    return resnet18_random_bn()


@pytest.fixture(scope="module")
def three() -> Tensor:
    return torch.randn(3, 3, 96, 96, dtype=torch.float64, generator=torch.Generator().manual_seed(2))


def test_a_0_dim_tensor_target_is_every_images_class_as_in_captum(resnet: nn.Module, three: Tensor) -> None:
    five = torch.tensor(5)
    theirs = Saliency(resnet).attribute(three.clone().requires_grad_(True), target=five, abs=False)
    torch.testing.assert_close(attribute(resnet, three, "saliency", five), theirs, atol=1e-12, rtol=0)
    raw = LayerGradCam(resnet, resnet.layer4).attribute(three, target=five, relu_attributions=True)
    low, high = raw.amin(dim=(2, 3), keepdim=True), raw.amax(dim=(2, 3), keepdim=True)
    assert (high > low).all()  # three maps that are not flat
    theirs = LayerAttribution.interpolate((raw - low) / (high - low), (96, 96), interpolate_mode="bilinear")
    low, high = theirs.amin(dim=(2, 3), keepdim=True), theirs.amax(dim=(2, 3), keepdim=True)
    theirs = ((theirs - low) / (high - low))[:, 0]  # scaled again after resizing, as the peers do (issue 29)
    torch.testing.assert_close(cam(resnet, three, "gradcam", five, select="layer4"), theirs.float(), atol=1e-5, rtol=0)


class Body(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU())
        self.logits = nn.Linear(6, 5)
        self.box = nn.Linear(6, 4)


class Detector(nn.Module):
    """Returns {"box": (B, 4), "logits": (B, 5)}: the box comes first."""

    def __init__(self, body: Body) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        pooled = self.body.features(x).mean(dim=(2, 3))
        return {"box": self.body.box(pooled), "logits": self.body.logits(pooled)}


class Classifier(nn.Module):
    """The oracle: the same network, rewritten to return only the logits."""

    def __init__(self, body: Body) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: Tensor) -> Tensor:
        return self.body.logits(self.body.features(x).mean(dim=(2, 3)))


@pytest.fixture
def pair() -> tuple[Detector, Classifier, Tensor]:
    torch.manual_seed(0)
    body = Body().double().eval()
    return Detector(body), Classifier(body), torch.randn(2, 3, 8, 8, dtype=torch.float64)


@pytest.mark.parametrize("output", ["logits", "out['logits']"])
def test_output_key_explains_that_tensor(pair: tuple[Detector, Classifier, Tensor], output: str) -> None:
    detector, classifier, x = pair
    for method in ("gradcam", "layercam", "scorecam"):
        expected = cam(classifier, x, method, [4, 1], select="body.features.1")
        torch.testing.assert_close(cam(detector, x, method, [4, 1], select="body.features.1", output=output), expected)
    for method in ("saliency", "integrated_gradients", "guided_backprop"):
        expected = attribute(classifier, x, method, None, steps=4)
        torch.testing.assert_close(attribute(detector, x, method, None, steps=4, output=output), expected)


def test_without_a_key_the_first_tensor_is_used_and_named_once(pair: tuple[Detector, Classifier, Tensor]) -> None:
    detector, _, x = pair
    first = r"the model's output \(dict\) holds 2 tensors; using the first, out\['box'\] \(others: out\['logits'\]\)"
    first += r"; pass output=\"logits\" \(or another key\) to choose$"  # the keyword as a Python caller writes it
    for run in (
        lambda: cam(detector, x, "gradcam", 3, select="body.features.1"),
        lambda: cam(detector, x, "scorecam", 3, select="body.features.1", batch_size=2),
        lambda: attribute(detector, x, "integrated_gradients", 3, steps=4, batch_size=3),
    ):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            run()
        assert len(seen) == 1 and seen[0].category is CaptureWarning
        assert seen[0].filename == __file__  # said at the caller's line
        with pytest.warns(CaptureWarning, match=first):
            run()
    unknown = r"has no tensor at output='score'; its keys are out\['box'\], out\['logits'\]"
    with pytest.raises(OptionError, match=unknown):
        attribute(detector, x, output="score")


def test_tied_scores_rank_the_lowest_index_first() -> None:
    """One rule for the top-1 target and the ranked classes: of tied scores, the lowest index, as
    torch.argmax (torch.topk, at 1000 classes, puts the higher index of a tie first)."""
    out = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0))
    out[:, [7, 400, 998]] = out.max() + 1  # a three-way tie at the top
    out[1, 5] = out.max() + 1  # row 1: one clear winner, then the tie
    assert class_indices(out, None).tolist() == [7, 5, 7] == out.argmax(dim=1).tolist()
    assert top_classes(out, 3)[[0, 2]].tolist() == [[7, 400, 998]] * 2
    assert top_classes(out, 4)[1].tolist() == [5, 7, 400, 998]
    torch.testing.assert_close(out.gather(1, top_classes(out, 5)), out.topk(5, dim=1).values, rtol=0, atol=0)


# -- the one contract of a callable target (explain/targets.py's docstring) ---------------------
def _logit_1(out: dict[str, Tensor]) -> Tensor:
    """One callable, written once for the whole output, that every function takes."""
    return out["logits"][:, 1]


def test_one_callable_means_the_same_in_every_function(pair: tuple[Detector, Classifier, Tensor]) -> None:
    """cam, attribute, patch_sweep, token-free: the callable gets the whole output, as the class does at output=."""
    import hookscope

    detector, classifier, x = pair
    leaf = x.clone().requires_grad_(True)
    oracle = torch.autograd.grad(classifier(leaf)[:, 1].sum(), leaf)[0]  # d logit_1 / d x, row by row
    torch.testing.assert_close(attribute(detector, x, "saliency", _logit_1), oracle, atol=1e-12, rtol=0)
    expected = cam(classifier, x, "gradcam", 1, select="body.features.1")
    torch.testing.assert_close(cam(detector, x, "gradcam", _logit_1, select="body.features.1"), expected)
    corrupt = torch.randn_like(x)
    by_class = hookscope.patch_sweep(detector, x, corrupt, target=1, output="logits", select="body.features")
    by_callable = hookscope.patch_sweep(detector, x, corrupt, target=_logit_1, select="body.features")
    assert by_callable.restored == by_class.restored and by_callable.metric_clean == by_class.metric_clean
    assert by_class.metric_clean == pytest.approx(float(classifier(x)[:, 1].mean().detach()), rel=1e-12)


def test_a_callable_for_the_first_tensor_still_works_with_a_warning(pair: tuple[Detector, Classifier, Tensor]) -> None:
    """Before one contract, cam and attribute gave a structured output's first tensor to the callable."""
    detector, _, x = pair
    leaf = x.clone().requires_grad_(True)
    oracle = torch.autograd.grad(detector(leaf)["box"][:, 0].sum(), leaf)[0]
    with pytest.warns(DeprecationWarning, match=r"reads the first tensor \(out\['box'\]\).*output=\"box\"$"):
        old = attribute(detector, x, "saliency", lambda box: box[:, 0])
    torch.testing.assert_close(old, oracle, atol=1e-12, rtol=0)


def test_what_a_callable_returns_is_held_to_the_contract() -> None:
    out = torch.arange(6.0).reshape(3, 2)
    assert call_target(lambda o: o[:, 0], out, 3).tolist() == [0.0, 2.0, 4.0]  # one value per row
    assert call_target(lambda o: o.sum(), out, 3).shape == ()  # one value for the batch
    with pytest.raises(TargetError, match=r"of cam\(\) returned shape \(\); return \(3,\), one value per row$"):
        call_target(lambda o: o.sum(), out, 3, per_row=True, caller="cam()")
    with pytest.raises(TargetError, match=r"returned shape \(3, 2\); return \(3,\), one value per row, or \(\)"):
        call_target(lambda o: o, out, 3)
    with pytest.raises(TargetError, match=r"must return a tensor .* got str"):
        call_target(lambda o: "high", out, 3)
    with pytest.warns(DeprecationWarning, match="returning a float is deprecated"):
        assert call_target(lambda o: 2.5, out, 3).item() == 2.5  # patch_sweep took a float before
    assert call_target(lambda t: t[:, 1], {"aux": out[:, :1], "logits": out}, 3, key="logits").tolist() == [1, 3, 5]
