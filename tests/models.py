"""Tiny in-repo models shared by the tests."""

from __future__ import annotations

import torch
from torch import nn


class LeNet(nn.Module):
    """The classic LeNet-5 for 3x32x32 input, as the hooks tutorials write it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.pool2 = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(torch.relu(self.conv1(x)))
        x = self.pool2(torch.relu(self.conv2(x)))
        x = torch.relu(self.fc1(x.flatten(1)))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class ConvInplaceReLU(nn.Module):
    """Conv2d then ReLU(inplace=True): the ReLU rewrites the conv's output tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.head = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.relu(self.conv(x)).flatten(1))


class SharedCell(nn.Module):
    """One Linear cell applied ``steps`` times, as an RNN cell in a loop."""

    def __init__(self, width: int = 4, steps: int = 3) -> None:
        super().__init__()
        self.cell = nn.Linear(width, width)
        self.steps = steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.steps):
            x = torch.tanh(self.cell(x))
        return x


def resnet18_random_bn() -> nn.Module:
    """resnet18 (10 classes, float64, eval) with random BatchNorm statistics and affine parameters, so
    that it is not positively homogeneous and class 5's Grad-CAM maps are not all zero."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    for bn in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
        bn.running_mean.normal_(0, 0.2)
        bn.running_var.uniform_(0.5, 1.5)
        nn.init.uniform_(bn.weight, 0.5, 1.5)
        nn.init.normal_(bn.bias, 0, 0.2)
    return model.double().eval()
