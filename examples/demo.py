"""A tour of the capture engine on a small CNN: what each layer saw, produced and got back.

Run with `make demo` (or `python examples/demo.py` inside the venv).
"""

from __future__ import annotations

import torch
from torch import nn

import hookscope


class LeNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 6, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        )  # fmt: skip
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def main() -> None:
    torch.manual_seed(0)
    model = LeNet()
    x = torch.randn(4, 3, 32, 32, requires_grad=True)
    print(f"{'module':<14}{'type':<10}{'params':>8}")
    for info in hookscope.list_modules(model):
        print(f"{info.name or '(model)':<14}{info.type:<10}{info.params:>8,}")

    kinds = ("input", "output", "grad_output", "param_grad")
    with hookscope.capture(model, [nn.Conv2d, nn.Linear], kinds=kinds) as cap:
        model(x).logsumexp(1).sum().backward()

    print(f"\n{'layer':<16}{'output shape':<18}{'min':>8}{'mean':>8}{'|grad| mean':>13}{'|dW| mean':>11}")
    for name, record in cap.items():
        out, grad, dw = record.output, record.grad_output, record.param_grad["weight"]
        print(
            f"{name:<16}{tuple(out.shape)!s:<18}{out.min():>8.3f}{out.mean():>8.3f}"
            f"{grad.abs().mean():>13.2e}{dw.abs().mean():>11.2e}"
        )
    print("\nthe in-place ReLUs did not rewrite the conv outputs: min < 0 above.")
    print(f"hooks left on the model: {hookscope.find_hooks(model)}")


if __name__ == "__main__":
    main()
