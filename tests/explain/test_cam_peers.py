"""cam()'s final maps beside pytorch-grad-cam 1.5.7's final output and TorchCAM 0.5.0's map (resized
and min-maxed again, as it is for display), to 1e-4, on the peers' own configurations: ResNet-18
layer4, EfficientNet-Lite0's head conv, MobileNetV2 features.18.0, train mode (which cam() explains
in eval mode, as the peers do), a frozen model and a module called twice. Both peers scale a map at
the layer's size, resize it and scale it again; a change to ``normalize_maps`` that drifts from
them fails here.

Left out, where the raw maps themselves differ by a documented choice: Grad-CAM++ on ResNet-18,
EfficientNet-Lite0 and the module called twice (pytorch-grad-cam's 1e-6 in alpha's denominator
against our 1e-7 matters when the gradients are small; with its eps the maps agree, tested below;
TorchCAM 0.5.0 never divides alpha: ``alpha[mask].div_`` writes to a copy), Eigen-CAM on
EfficientNet-Lite0 and the module called twice (a principal component's sign is arbitrary: we orient
it by the mean activation, pytorch-grad-cam keeps the SVD's), XGrad-CAM on MobileNetV2 for TorchCAM
(its 1e-8 against our 1e-7, over a signed conv whose sum is near 0; tested with its eps). On a module called twice,
pytorch-grad-cam reads the first call and TorchCAM the last (cam()'s default): both are compared.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from functools import cache

import pytest
import torch
import torch.nn.functional as F
import torchcam.methods
import torchvision
from pytorch_grad_cam import EigenCAM, GradCAM, GradCAMPlusPlus, LayerCAM, ScoreCAM, XGradCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from torch import Tensor, nn

from hookscope import zoo
from hookscope.errors import CaptureWarning
from hookscope.explain import cam_maths as maths
from hookscope.explain.cam import cam

TOLERANCE = 1e-4
GRAD_CAM = {"gradcam": GradCAM, "gradcam++": GradCAMPlusPlus, "xgradcam": XGradCAM, "layercam": LayerCAM}
PYTORCH_GRAD_CAM = {**GRAD_CAM, "eigencam": EigenCAM, "scorecam": ScoreCAM}
TORCHCAM = {"gradcam": torchcam.methods.GradCAM, "xgradcam": torchcam.methods.XGradCAM}
TORCHCAM["layercam"] = torchcam.methods.LayerCAM


@cache
def lite0() -> nn.Module:
    """Loaded once: the peers and cam() leave it as they found it (eval mode, no hook)."""
    return zoo.efficientnet_lite0()


@cache
def mobilenet_v2() -> nn.Module:
    return zoo.mobilenet_v2()


@cache
def _resnet18() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18().eval()


def resnet18() -> nn.Module:
    """A copy for each test: train mode updates BatchNorm's running statistics."""
    return copy.deepcopy(_resnet18())


def frozen_resnet18() -> nn.Module:
    return resnet18().requires_grad_(False)


class Twice(nn.Module):
    """``shared`` runs twice in one forward pass."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 6, 3, padding=1)
        self.shared = nn.Sequential(nn.Conv2d(6, 6, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(6, 4)

    def forward(self, x: Tensor) -> Tensor:
        x = self.shared(F.max_pool2d(self.shared(self.stem(x).relu()), 2))
        return self.head(x.mean(dim=(2, 3)))


# name: (model, layer, input side, train mode, methods compared with pytorch-grad-cam)
SHARED = ("gradcam", "xgradcam", "layercam")
CASES: dict[str, tuple[Callable[[], nn.Module], str, int, bool, tuple[str, ...]]] = {
    "resnet18-layer4": (resnet18, "layer4", 96, False, (*SHARED, "eigencam")),
    "lite0-head": (lite0, "_conv_head", 128, False, SHARED),
    "mobilenetv2-features.18.0": (mobilenet_v2, "features.18.0", 96, False, (*SHARED, "gradcam++", "eigencam")),
    "resnet18-train-mode": (resnet18, "layer4", 96, True, (*SHARED, "eigencam")),
    "resnet18-frozen": (frozen_resnet18, "layer4", 96, False, (*SHARED, "eigencam")),
}
PAIRS = [(case, method) for case, spec in CASES.items() for method in spec[4]]
TORCHCAM_PAIRS = [
    (case, method) for case in ("resnet18-layer4", "lite0-head", "resnet18-train-mode") for method in TORCHCAM
] + [("mobilenetv2-features.18.0", "gradcam"), ("mobilenetv2-features.18.0", "layercam")]


@pytest.fixture
def quiet_signed() -> Iterator[None]:
    """The conv layers here have signed outputs; the warning about it is tested in test_cam_layers."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assumes non-negative activations", category=CaptureWarning)
        yield


def _input(side: int) -> Tensor:
    return torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(1))


def pytorch_grad_cam(method: str, model: nn.Module, layer: str, x: Tensor, targets: list[int], train: bool) -> Tensor:
    """pytorch-grad-cam's final maps (B, H, W). Its constructor puts the model in eval mode; train
    mode is set again after it. Its input requires grad, or a frozen model gives it no gradient."""
    module = dict(model.named_modules())[layer]
    leaf = x.clone().requires_grad_(True)
    with PYTORCH_GRAD_CAM[method](model=model, target_layers=[module]) as peer:
        model.train(train)
        return torch.from_numpy(peer(input_tensor=leaf, targets=[ClassifierOutputTarget(t) for t in targets]))


def torchcam_map(method: str, model: nn.Module, layer: str, x: Tensor, targets: list[int]) -> Tensor:
    """TorchCAM's map at the layer's size, resized bilinearly to the input and min-maxed again as its
    own ``_normalize`` does (eps 1e-8), as for display."""
    with TORCHCAM[method](model, target_layer=layer) as extractor:
        (maps,) = extractor(targets, model(x))  # (B, h, w), min-maxed
    resized = F.interpolate(maps[:, None], size=x.shape[2:], mode="bilinear", align_corners=False)[:, 0]
    low = resized.amin(dim=(1, 2), keepdim=True)
    return (resized - low) / ((resized - low).amax(dim=(1, 2), keepdim=True) + 1e-8)


def _top1(model: nn.Module, x: Tensor, train: bool) -> list[int]:
    with torch.no_grad():
        return [int(c) for c in model.train(train)(x).argmax(dim=1)]


def _ours(model: nn.Module, x: Tensor, method: str, targets: list[int], layer: str) -> Tensor:
    """cam()'s maps; a model in training mode is explained in eval mode, with a word, and left in
    training mode with its BatchNorm statistics as they were."""
    train, before = model.training, copy.deepcopy(model.state_dict())
    with pytest.warns(CaptureWarning, match="ran it in eval mode") if train else nullcontext():
        ours = cam(model, x, method, targets, select=layer)
    assert model.training is train
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    return ours


@pytest.mark.usefixtures("quiet_signed")
@pytest.mark.parametrize(("case", "method"), PAIRS)
def test_final_maps_equal_pytorch_grad_cams(case: str, method: str) -> None:
    make, layer, side, train, _ = CASES[case]
    model, x = make(), _input(side)
    targets = _top1(model, x, False)
    theirs = pytorch_grad_cam(method, model, layer, x, targets, False)  # the model as it predicts
    ours = _ours(model.train(train), x, method, targets, layer)
    assert (theirs.amax(dim=(1, 2)) > 0.99).all()  # maps that show something, not two flat ones
    torch.testing.assert_close(ours, theirs, atol=TOLERANCE, rtol=0)


@pytest.mark.usefixtures("quiet_signed")
@pytest.mark.parametrize(("case", "method"), TORCHCAM_PAIRS)
def test_final_maps_equal_torchcams_resized_and_rescaled(case: str, method: str) -> None:
    make, layer, side, train, _ = CASES[case]
    model, x = make(), _input(side)
    targets = _top1(model, x, False)
    theirs = torchcam_map(method, model.eval(), layer, x, targets)
    ours = _ours(model.train(train), x, method, targets, layer)
    assert (theirs.amax(dim=(1, 2)) > 0.99).all()
    torch.testing.assert_close(ours, theirs, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("method", ["gradcam", "xgradcam", "layercam", "scorecam"])
def test_a_module_called_twice_is_read_at_the_call_pytorch_grad_cam_reads(method: str) -> None:
    """pytorch-grad-cam reads a shared module's first call (activations appended, gradients prepended,
    then index 0): cam(call=0) is the same map. Not Grad-CAM++ (the eps in alpha, with this net's
    small gradients) nor Eigen-CAM (the component's sign)."""
    model, x = Twice().eval(), _input(16)
    targets = _top1(model, x, False)
    theirs = pytorch_grad_cam(method, model, "shared", x, targets, False)
    ours = cam(model, x, method, targets, select="shared", call=0)
    assert (theirs.amax(dim=(1, 2)) > 0.99).all()
    torch.testing.assert_close(ours, theirs, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("method", TORCHCAM)
def test_a_module_called_twice_is_read_at_its_last_call_as_torchcam_reads_it(method: str) -> None:
    model, x = Twice().eval(), _input(16)
    targets = _top1(model, x, False)
    theirs = torchcam_map(method, model, "shared", x, targets)
    ours = cam(model, x, method, targets, select="shared")
    assert (theirs.amax(dim=(1, 2)) > 0.99).all()
    torch.testing.assert_close(ours, theirs, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize(("make", "layer", "side"), [(resnet18, "layer4", 96), (lite0, "_conv_head", 128)])
def test_grad_cam_pp_differs_from_pytorch_grad_cams_by_its_eps_alone(
    make: Callable[[], nn.Module], layer: str, side: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With pytorch-grad-cam's 1e-6 in alpha's denominator instead of our 1e-7, the maps agree."""
    model, x = make(), _input(side)
    targets = _top1(model, x, False)
    theirs = pytorch_grad_cam("gradcam++", model, layer, x, targets, False)
    monkeypatch.setattr(maths, "_EPS", 1e-6)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assumes non-negative activations", category=CaptureWarning)
        ours = cam(model, x, "gradcam++", targets, select=layer)
    torch.testing.assert_close(ours, theirs, atol=TOLERANCE, rtol=0)


def test_xgrad_cam_differs_from_torchcams_by_its_eps_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """MobileNetV2 features.18.0 (a signed conv): with TorchCAM's 1e-8 in the denominator, they agree."""
    model, x = mobilenet_v2(), _input(96)
    targets = _top1(model, x, False)
    theirs = torchcam_map("xgradcam", model, "features.18.0", x, targets)
    monkeypatch.setattr(maths, "_EPS", 1e-8)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assumes non-negative activations", category=CaptureWarning)
        ours = cam(model, x, "xgradcam", targets, select="features.18.0")
    torch.testing.assert_close(ours, theirs, atol=TOLERANCE, rtol=0)
