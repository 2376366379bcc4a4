"""Grad-CAM of one 224x224 image on EfficientNet-Lite0 (``hookscope.zoo``) and ResNet-18, on the CPU.

Every tool gets the same layer (the one ``hookscope.pick_layer`` finds, outside the clock) and the
same class, and returns a map at the input's size: TorchCAM's and Captum's layer-sized maps are
upsampled bilinearly, as hookscope and pytorch-grad-cam do. The bare run is the least any
Grad-CAM needs: a forward pass and the backward pass of the class score to the input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import hookscope
from harness import Case, Run

ROUNDS = 20


def efficientnet_lite0() -> nn.Module:
    return hookscope.zoo.efficientnet_lite0().eval()


def resnet18() -> nn.Module:
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet18().eval()


MODELS: dict[str, Callable[[], nn.Module]] = {"EfficientNet-Lite0": efficientnet_lite0, "ResNet-18": resnet18}


def grad_cam(model_name: str) -> Case:
    model = MODELS[model_name]()
    x = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    layer, _ = hookscope.pick_layer(model, x)
    with torch.no_grad():
        target = int(model(x).argmax())
    module = dict(model.named_modules())[layer]

    def bare() -> Tensor:
        leaf = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(model(leaf)[0, target], leaf)
        return grad

    factories: dict[str, Callable[[], Run]] = {
        "hookscope.cam": lambda: lambda: hookscope.cam(model, x, "gradcam", target=target, layer=layer),
        "hookscope.cam (layer auto-picked)": lambda: lambda: hookscope.cam(model, x, "gradcam", target=target),
        "pytorch-grad-cam": lambda: _pytorch_grad_cam(model, module, x, target),
        "TorchCAM": lambda: _torchcam(model, layer, x, target),
        "Captum LayerGradCam": lambda: _captum(model, module, x, target),
    }
    return Case(f"Grad-CAM, 1 image, {model_name} ({layer})", bare, factories, ROUNDS)


def _pytorch_grad_cam(model: nn.Module, module: nn.Module, x: Tensor, target: int) -> Run:
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    def run() -> Any:
        with GradCAM(model=model, target_layers=[module]) as cam:
            return cam(input_tensor=x, targets=[ClassifierOutputTarget(target)])

    return run


def _torchcam(model: nn.Module, layer: str, x: Tensor, target: int) -> Run:
    from torchcam.methods import GradCAM

    def run() -> Tensor:
        with GradCAM(model, target_layer=layer) as extractor:
            maps = extractor(target, model(x))
        return F.interpolate(maps[0][None], size=x.shape[2:], mode="bilinear", align_corners=False)

    return run


def _captum(model: nn.Module, module: nn.Module, x: Tensor, target: int) -> Run:
    from captum.attr import LayerAttribution, LayerGradCam

    def run() -> Tensor:
        maps = LayerGradCam(model, module).attribute(x, target=target, relu_attributions=True)
        return LayerAttribution.interpolate(maps, x.shape[2:], interpolate_mode="bilinear")

    return run


def score_cam(model_name: str, batch_size: int = 32) -> Case:
    """Score-CAM of one 224x224 image at the auto-picked layer (EfficientNet-Lite0: 1280 channels at
    7x7), both tools running ``batch_size`` masked copies per forward pass. The bare run is the floor
    of any Score-CAM: a forward pass of every masked copy (one per channel), masks not built."""
    model = MODELS[model_name]()
    x = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    layer, _ = hookscope.pick_layer(model, x)
    module = dict(model.named_modules())[layer]
    with hookscope.capture(model, layer) as cap, torch.no_grad():
        target = int(model(x).argmax())
    channels = cap[layer].calls[-1].output.shape[1]

    def bare() -> list[Tensor]:
        with torch.no_grad():
            return [model(x.expand(min(batch_size, channels - i), -1, -1, -1))[:, target]
                    for i in range(0, channels, batch_size)]  # fmt: skip

    factories: dict[str, Callable[[], Run]] = {
        "hookscope.cam": lambda: (
            lambda: hookscope.cam(model, x, "scorecam", target=target, layer=layer, batch_size=batch_size)
        ),
        "pytorch-grad-cam": lambda: _pytorch_score_cam(model, module, x, target, batch_size),
    }
    return Case(f"Score-CAM, 1 image, {model_name} ({layer}, {channels} channels)", bare, factories, 3)


def _pytorch_score_cam(model: nn.Module, module: nn.Module, x: Tensor, target: int, batch_size: int) -> Run:
    from pytorch_grad_cam import ScoreCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    def run() -> Any:
        with ScoreCAM(model=model, target_layers=[module]) as cam:
            cam.batch_size = batch_size
            return cam(input_tensor=x, targets=[ClassifierOutputTarget(target)])

    return run
