"""ResNet-18 (torchvision, random init, eval) on the CPU.

* ``leaves-bN``: every leaf module's output, cloned, batch N, under no_grad.
* ``layers-bN``: three selected layers (``layer2``, ``layer3``, ``layer4``), batch N.
* ``convs-b8``: forward and backward, every conv's output and output gradient.

The leaf case checks what each tool kept for ``bn1`` against the true BatchNorm output: the
``ReLU(inplace=True)`` after it rewrites a kept reference (pytorch/captum#156).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torchvision
from torch import Tensor, nn

import hookscope
import tools
from harness import Case, Run

LAYERS = ["layer2", "layer3", "layer4"]
ROUNDS = {1: 30, 8: 12, 32: 6}
SIZE = 224  # the smoke benchmark shrinks it


def resnet18() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18().eval()


def image_batch(batch: int) -> Tensor:
    return torch.randn(batch, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


def no_grad(run: tools.Runner, x: Tensor) -> Run:
    def call() -> Any:
        with torch.no_grad():
            return run(x)

    return call


def leaves(batch: int) -> Case:
    model, x = resnet18(), image_batch(batch)
    names = tools.leaf_names(model)
    with torch.no_grad():
        expected = model.bn1(model.conv1(x))
    factories: dict[str, Callable[[], tools.Runner]] = {
        "hookscope": lambda: tools.hookscope_forward(model, None),
        "hand-written clone hooks": lambda: tools.hand_forward(model, names),
        "torchvision FX extractor (no copy)": lambda: tools.fx_extractor(model, names),
        "Captum LayerActivation": lambda: tools.captum_activation(model, names),
        "TorchLens trace": lambda: tools.torchlens_trace(model),
        "TorchLens record (fast path)": lambda: tools.torchlens_record(model),
        "nnsight (.clone().save())": lambda: tools.nnsight_forward(model, names),
    }
    return Case(
        f"ResNet-18 every leaf, b{batch}",
        no_grad(model, x),
        {name: _bound(make, x) for name, make in factories.items()},
        ROUNDS.get(batch, 10),
        unpack=tools.unpack,
        check=_bn1_check(expected),
    )


def layers(batch: int) -> Case:
    model, x = resnet18(), image_batch(batch)
    factories: dict[str, Callable[[], tools.Runner]] = {
        "hookscope": lambda: tools.hookscope_forward(model, LAYERS),
        "hand-written clone hooks": lambda: tools.hand_forward(model, LAYERS),
        "torchvision FX extractor (no copy)": lambda: tools.fx_extractor(model, LAYERS),
        "Captum LayerActivation": lambda: tools.captum_activation(model, LAYERS),
        "TorchLens trace": lambda: tools.torchlens_trace(model, LAYERS),
        "nnsight (.clone().save())": lambda: tools.nnsight_forward(model, LAYERS),
    }
    return Case(
        f"ResNet-18 3 layers, b{batch}",
        no_grad(model, x),
        {name: _bound(make, x) for name, make in factories.items()},
        ROUNDS.get(batch, 10),
        unpack=tools.unpack,
    )


def convs(batch: int = 8) -> Case:
    """Forward and backward; parameter gradients accumulate across runs (no allocation per run)."""
    model, x = resnet18(), image_batch(batch)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]

    def loss(out: Tensor) -> Tensor:
        return out.sum()

    def bare() -> None:
        loss(model(x)).backward()

    factories: dict[str, Callable[[], tools.Runner]] = {
        "hookscope": lambda: tools.hookscope_backward(model, nn.Conv2d, loss),
        "hand-written tensor hooks": lambda: tools.hand_backward(model, names, loss),
        "full backward hooks": lambda: tools.full_backward_hooks(model, names, loss),
        "TorchLens record (all modules, grads)": lambda: tools.torchlens_backward(model, loss),
        "nnsight (.grad.save())": lambda: tools.nnsight_backward(model, names),
    }
    return Case(
        f"ResNet-18 fwd+bwd every conv out+grad, b{batch}",
        bare,
        {name: _bound(make, x, grad=True) for name, make in factories.items()},
        ROUNDS.get(batch, 10),
        unpack=tools.unpack,
    )


def _bound(make: Callable[[], tools.Runner], x: Tensor, *, grad: bool = False) -> Callable[[], Run]:
    def build() -> Run:
        run = make()
        return (lambda: run(x)) if grad else no_grad(run, x)

    return build


def _bn1_check(expected: Tensor) -> Callable[[str, Any], str]:
    def check(tool: str, result: Any) -> str:
        got = _bn1(result)
        if got is None:
            return ""
        return "" if torch.equal(got, expected) else "kept bn1 values rewritten by the in-place ReLU"

    return check


def _bn1(result: Any) -> Tensor | None:
    """What a tool kept for ``bn1`` (None where its result is opaque to us, as TorchLens')."""
    if isinstance(result, hookscope.Capture):
        return result["bn1"].output
    if isinstance(result, dict) and "bn1" in result:
        value = result["bn1"]
        return value[0] if isinstance(value, list) else value
    if isinstance(result, list) and len(result) > 1 and isinstance(result[1], Tensor):  # Captum, layer order
        return result[1]
    return None
