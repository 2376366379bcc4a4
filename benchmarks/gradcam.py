"""Grad-CAM of one 224x224 image on EfficientNet-Lite0 (``hookscope.zoo``) and ResNet-18, on the CPU.

Every tool gets the same layer (the one ``hookscope.pick_layer`` finds, outside the clock) and the
same class, and returns a map at the input's size: TorchCAM's and Captum's layer-sized maps are
upsampled bilinearly, as hookscope and pytorch-grad-cam do. The bare run is the least any
Grad-CAM needs: a forward pass and the backward pass of the class score to the input.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import hookscope
from harness import Case, Row, Run, _build, measure, table

ROUNDS = 20
SCORE_CAM_ROUNDS = 2  # one Score-CAM is 1,280 masked forward passes: ~25 s on 2 idle cores, ~75 s CPU at 1 thread


def efficientnet_lite0() -> nn.Module:
    return hookscope.zoo.efficientnet_lite0().eval()


def resnet18() -> nn.Module:
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet18().eval()


MODELS: dict[str, Callable[[], nn.Module]] = {"EfficientNet-Lite0": efficientnet_lite0, "ResNet-18": resnet18}


def single_call_layer(model: nn.Module, x: Tensor) -> str:
    """The layer ``pick_layer`` finds, or the last conv layer when that one runs more than once: a
    shared module (EfficientNet-Lite0's ``_swish`` ReLU6) is read at its last call by hookscope and at
    its first by pytorch-grad-cam, so the tools would compute different maps."""
    layer, _ = hookscope.pick_layer(model, x)
    with hookscope.capture(model, layer) as cap, torch.no_grad():
        model(x)
    if len(cap[layer].calls) == 1:
        return str(layer)
    return [name for name, m in model.named_modules() if isinstance(m, nn.Conv2d)][-1]


def grad_cam(model_name: str) -> Case:
    model = MODELS[model_name]()
    x = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    layer = single_call_layer(model, x)
    with torch.no_grad():
        target = int(model(x).argmax())
    module = dict(model.named_modules())[layer]

    def bare() -> Tensor:
        leaf = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(model(leaf)[0, target], leaf)
        return grad

    factories: dict[str, Callable[[], Run]] = {
        "hookscope.cam": lambda: lambda: hookscope.cam(model, x, "gradcam", target=target, select=layer),
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
    """Score-CAM of one 224x224 image at the model's last conv layer (EfficientNet-Lite0's
    ``_conv_head``: 1280 channels at 7x7), both tools running ``batch_size`` masked copies per
    forward pass. The bare run is the floor of any Score-CAM: a forward pass of every masked copy
    (one per channel), masks not built.

    Not the auto-picked layer: on EfficientNet-Lite0 that is the shared ``_swish`` ReLU6 module,
    whose last call hookscope reads (1280 channels) and whose first call pytorch-grad-cam reads
    (the stem's 32 channels at 112x112), which made its Score-CAM 40x cheaper and not the same map."""
    model = MODELS[model_name]()
    x = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    layer = [name for name, m in model.named_modules() if isinstance(m, nn.Conv2d)][-1]
    module = dict(model.named_modules())[layer]
    with hookscope.capture(model, layer) as cap, torch.no_grad():
        target = int(model(x).argmax())
    calls = len(cap[layer].calls)
    assert calls == 1, f"{layer} runs {calls} times: the tools would read different calls"
    channels = cap[layer].calls[-1].output.shape[1]

    def bare() -> list[Tensor]:
        with torch.no_grad():
            return [model(x.expand(min(batch_size, channels - i), -1, -1, -1))[:, target]
                    for i in range(0, channels, batch_size)]  # fmt: skip

    factories: dict[str, Callable[[], Run]] = {
        "hookscope.cam": lambda: (
            lambda: hookscope.cam(model, x, "scorecam", target=target, select=layer, batch_size=batch_size)
        ),
        "pytorch-grad-cam": lambda: _pytorch_score_cam(model, module, x, target, batch_size),
    }
    title = f"Score-CAM, 1 image, {model_name} ({layer}, {channels} channels, batch {batch_size})"
    return ScoreCamCase(title, bare, factories, SCORE_CAM_ROUNDS)


@dataclass
class ScoreCamCase(Case):
    """A case whose runs are long: no warm-up beyond each tool's first (checking) run, and no peak
    memory run (the profiler's memory trace of 40 forward passes of 32 images)."""

    def run(self, only: Iterable[str] | None = None, *, rounds: int | None = None, memory: bool = False) -> list[Row]:
        chosen = {name: _build(self.tools[name]) for name in (self.tools if only is None else only)}
        return measure(self.title, self.bare, chosen, rounds=rounds or self.rounds, warmup=0, memory=False)


def _pytorch_score_cam(model: nn.Module, module: nn.Module, x: Tensor, target: int, batch_size: int) -> Run:
    from pytorch_grad_cam import ScoreCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    def run() -> Any:
        with ScoreCAM(model=model, target_layers=[module]) as cam:
            cam.batch_size = batch_size
            return cam(input_tensor=x, targets=[ClassifierOutputTarget(target)])

    return run


def main() -> None:
    """Score-CAM: bare, hookscope and pytorch-grad-cam side by side in one process (neither patches
    torch on import), interleaved; with HOOKSCOPE_BENCH_CLOCK=cpu and --threads 1 on a shared machine."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--rounds", type=int, default=SCORE_CAM_ROUNDS)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1 with HOOKSCOPE_BENCH_CLOCK=cpu)")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = score_cam("EfficientNet-Lite0", args.batch_size).run(rounds=args.rounds)
    for row in rows:
        print("ROW " + json.dumps(asdict(row)))
    print(table(rows))


if __name__ == "__main__":
    main()
