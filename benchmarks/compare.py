"""What comparing costs: hookscope.compare.cka against pytorch-cka, and divergence against two forward passes.

    /work/main/.venv/bin/python benchmarks/compare.py [--images 1024] [--size 64] [--rounds 3] [--smoke]
    HOOKSCOPE_BENCH_CLOCK=cpu python benchmarks/compare.py --threads 1   # on a shared machine

* **CKA**: two random-init ResNet-18s (torchvision, seeds 0 and 1, eval), 8 x 8 layers (``bn1``,
  ``relu``, ``maxpool``, ``layer1`` ... ``layer4``, ``avgpool``), ``--images`` random images at
  ``--size`` in batches of 64: pytorch-cka 1.1.3 (``cka.compute_cka``, the bare run of the case)
  against ``hookscope.compare.cka``. Beside the ratio, each tool's largest error over the 8 x 8
  matrix against a float64 reference (features cloned by plain hooks, float64 Gram matrices, the
  unbiased HSIC written out), and both values for ``bn1`` (which ResNet-18's in-place ReLU rewrites).
* **Divergence**: ResNet-18 and a copy with one weight of ``layer3.0.conv1`` changed, batch 8 at
  ``--size``: one forward pass of each (bare) against ``hookscope.compare.divergence`` (every leaf).

Prints the Markdown table, then one ``ROW {json}`` line per row.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from dataclasses import asdict
from typing import Any

import torch
from torch import Tensor, nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import hookscope  # noqa: E402
from harness import Row, measure, table  # noqa: E402

LAYERS = ["bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool"]
BATCH = 64


class Batches:
    """The batches as a loader (pytorch-cka reads a list as several loaders)."""

    def __init__(self, batches: list[Tensor]) -> None:
        self.batches = batches

    def __iter__(self) -> Any:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _resnets() -> tuple[nn.Module, nn.Module]:
    import torchvision

    torch.manual_seed(0)
    a = torchvision.models.resnet18().eval()
    torch.manual_seed(1)
    return a, torchvision.models.resnet18().eval()


def reference(a: nn.Module, b: nn.Module, loader: Batches) -> Tensor:
    """Minibatch CKA from cloned features: float64 Gram matrices, Song et al.'s HSIC1 as written."""
    sums = [torch.zeros(len(LAYERS), len(LAYERS), dtype=torch.float64) for _ in range(3)]
    for x in loader:
        ka, kb = (_grams(m, x) for m in (a, b))
        for i, k in enumerate(ka):
            sums[1][i] += _hsic1(k, k)
            for j, l_ in enumerate(kb):
                sums[0][i, j] += _hsic1(k, l_)
                sums[2][i, j] += _hsic1(l_, l_)
    return sums[0] / (sums[1] * sums[2]).sqrt()


def _grams(model: nn.Module, x: Tensor) -> list[Tensor]:
    found: dict[str, Tensor] = {}
    modules = dict(model.named_modules())
    hooks = [modules[n].register_forward_hook(lambda m, i, o, n=n: found.__setitem__(n, o.detach().clone()))
             for n in LAYERS]  # fmt: skip
    with torch.no_grad():
        model(x)
    for hook in hooks:
        hook.remove()
    return [(f := found[n].flatten(1).double()) @ f.T for n in LAYERS]


def _hsic1(k: Tensor, l_: Tensor) -> Tensor:
    n = len(k)
    k, l_ = k - torch.diag(k.diagonal()), l_ - torch.diag(l_.diagonal())
    one = torch.ones(n, dtype=k.dtype)
    value = (k * l_).sum() + k.sum() * l_.sum() / ((n - 1) * (n - 2)) - 2 / (n - 2) * (one @ k @ l_ @ one)
    return value / (n * (n - 3))


def cka_case(images: int, size: int, rounds: int) -> list[Row]:
    from cka import compute_cka  # pytorch-cka 1.1.3

    a, b = _resnets()
    torch.manual_seed(2)
    loader = Batches(list(torch.randn(images, 3, size, size).split(BATCH)))

    def peer() -> Tensor:
        return compute_cka(a, b, loader, layers=LAYERS, device="cpu", progress=False)[0]

    def ours() -> Tensor:
        return hookscope.compare.cka(a, b, loader, select=LAYERS).values

    title = f"CKA, 8 x 8 layers of two ResNet-18s, {images} images at {size}x{size}; bare = pytorch-cka"
    rows = measure(title, peer, {"hookscope.compare.cka": ours}, rounds=rounds, memory=False)
    right = reference(a, b, loader)
    for row, values in zip(rows, (peer(), ours()), strict=True):
        error = (values.double() - right).abs().max().item()
        row.note = f"max error {error:.2g}; bn1 {values[0, 0]:.4f} (right {right[0, 0]:.4f})"
        row.extra["max_error"] = error
    rows[0].tool = "pytorch-cka 1.1.3"
    return rows


def divergence_case(size: int, rounds: int) -> list[Row]:
    a, _ = _resnets()
    b = copy.deepcopy(a)
    with torch.no_grad():
        b.layer3[0].conv1.weight[0, 0, 1, 1] += 0.5
    torch.manual_seed(3)
    x = torch.randn(8, 3, size, size)

    def forwards() -> Any:
        with torch.no_grad():
            return a(x), b(x)

    def ours() -> Any:
        return hookscope.compare.divergence(a, b, x)

    title = f"divergence of two ResNet-18s (every leaf), batch 8 at {size}x{size}; bare = one forward of each"
    rows = measure(title, forwards, {"hookscope.compare.divergence": ours}, rounds=rounds, memory=False)
    first = ours().first(rtol=1e-6)
    rows[1].note = f"first past 1e-6: {first.name if first else None}"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="small and fast: 128 images at 32x32, 2 rounds")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1 with HOOKSCOPE_BENCH_CLOCK=cpu)")
    args = parser.parse_args()
    images, size, rounds = (128, 32, 2) if args.smoke else (args.images, args.size, args.rounds)
    torch.set_num_threads(args.threads)
    rows = cka_case(images, size, rounds) + divergence_case(max(size, 64), rounds)
    for row in rows:
        print("ROW " + json.dumps(asdict(row)))
    print(table(rows))


if __name__ == "__main__":
    main()
