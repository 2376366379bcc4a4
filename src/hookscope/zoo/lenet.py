"""LeNet-5 on scikit-learn's handwritten digits: a small real network whose weights ship inside hookscope.

The data is ``sklearn.datasets.load_digits()`` (1,797 8x8 images, 0..16 ink, bundled with
scikit-learn, nothing is downloaded), upsampled bilinearly to 32x32 and normalised as
``(ink / 16 - MEAN) / STD``. The split is fixed: the first 1,437 images (80%, in the given order)
train, the last 360 test. ``lenet()`` loads the shipped weights (``hookscope/zoo/data/lenet_digits.pt``,
``WEIGHTS``), which ``scripts/train_lenet.py`` reproduces with ``train()``.

This is ``hookscope.zoo.lenet`` (the old ``hookscope.lenet`` forwards here for one release). The
CLI's ``lenet`` model (``hookscope.cli.models``) feeds it pictures with a one-channel
``hookscope.zoo.preprocess.Preprocess`` of ``MEAN`` and ``STD``; ``hookscope demo --model lenet``
reports it on ``digits("test")``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..base.optional import require
from ..base.words import closest
from ..errors import OptionError

DIGIT_LABELS = [str(i) for i in range(10)]
MEAN, STD = 0.305, 0.323  # of the upsampled training images scaled to [0, 1]
TRAIN_SIZE = 1437  # the first 80% of load_digits(); the last 360 images are the test split
WEIGHTS = "zoo/data/lenet_digits.pt"  # inside the hookscope package, as scripts/train_lenet.py writes it


class LeNet(nn.Module):
    """LeNet-5 (LeCun et al., 1998) with ReLU and max pooling, for (B, 1, 32, 32) inputs and 10 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(120, 84)
        self.relu4 = nn.ReLU()
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool1(self.relu1(self.conv1(x)))  # (B, 6, 14, 14)
        x = self.pool2(self.relu2(self.conv2(x)))  # (B, 16, 5, 5)
        x = self.relu3(self.fc1(x.flatten(1)))  # (B, 120)
        x = self.relu4(self.fc2(x))  # (B, 84)
        logits: Tensor = self.fc3(x)  # (B, 10)
        return logits


def lenet() -> nn.Module:
    """LeNet-5 trained on the digits' training split, in eval mode; weights loaded strictly, ``weights_only=True``."""
    model = LeNet()
    with resources.files("hookscope").joinpath(WEIGHTS).open("rb") as file:
        model.load_state_dict(torch.load(file, map_location="cpu", weights_only=True), strict=True)
    return model.eval()


def digits(split: str = "test") -> tuple[Tensor, Tensor]:
    """The ``"train"``, ``"test"`` or ``"all"`` digits as model input (N, 1, 32, 32) and labels (N,) int64."""
    parts = {"train": slice(None, TRAIN_SIZE), "test": slice(TRAIN_SIZE, None), "all": slice(None)}
    if split not in parts:
        raise OptionError(f"split must be one of {sorted(parts)}, got {split!r}{closest(str(split), parts)}")
    bunch = require("sklearn.datasets").load_digits()
    ink = torch.from_numpy(bunch.images[parts[split]]).float()[:, None] / 16  # (N, 1, 8, 8) in [0, 1]
    big = F.interpolate(ink, size=(32, 32), mode="bilinear", align_corners=False)  # (N, 1, 32, 32)
    return (big - MEAN) / STD, torch.from_numpy(bunch.target[parts[split]]).long()


def digit_picture(x: Tensor, *, scale: int = 8) -> Any:
    """One input digit (1, 32, 32) or (32, 32) as a grayscale PIL image, dark ink on white, ``scale`` x larger."""
    image = require("PIL.Image")
    ink = (x.detach().cpu().reshape(x.shape[-2:]) * STD + MEAN).clamp(0, 1)  # (32, 32), 1 = ink
    pixels = ((1 - ink) * 255).round().byte().numpy()
    small = image.fromarray(pixels)  # mode "L"
    return small.resize((small.width * scale, small.height * scale), image.Resampling.NEAREST)


def train(epochs: int = 60, seed: int = 0, *, lr: float = 1e-3, batch_size: int = 32) -> nn.Module:
    """LeNet-5 trained from ``seed`` on the training split, deterministic on one CPU thread (~12 s for 60 epochs).

    Adam on the cross-entropy, each batch randomly shifted, rotated and scaled (``_jitter``): the test
    digits come from other writers, and without the jitter the test accuracy stays near 93%.
    """
    inputs, labels = digits("train")
    with _deterministic(seed):
        model = LeNet()
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        draws = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            for batch in torch.split(torch.randperm(len(labels), generator=draws), batch_size):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(_jitter(inputs[batch], draws)), labels[batch])
                torch.autograd.backward(loss)
                optimizer.step()
    return model.eval()


def _jitter(x: Tensor, generator: torch.Generator, shift: float = 4, turn: float = 0.2, zoom: float = 0.1) -> Tensor:
    """Each digit (B, 1, 32, 32) moved up to ``shift`` pixels, turned up to ``turn`` radians, scaled by 1 ± ``zoom``."""
    n = len(x)
    angle = (2 * torch.rand(n, generator=generator) - 1) * turn
    scale = 1 + (2 * torch.rand(n, generator=generator) - 1) * zoom
    move = (2 * torch.rand(n, 2, generator=generator) - 1) * shift * 2 / x.shape[-1]  # grid units: 2 = the width
    cos, sin = torch.cos(angle) * scale, torch.sin(angle) * scale
    theta = torch.stack([torch.stack([cos, -sin, move[:, 0]], 1), torch.stack([sin, cos, move[:, 1]], 1)], 1)
    paper = -MEAN / STD  # the input value of blank paper, so that what moves in from the border is blank
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)  # (B, 32, 32, 2)
    return F.grid_sample(x - paper, grid, align_corners=False) + paper


@contextmanager
def _deterministic(seed: int) -> Iterator[None]:
    """Seeded RNG, deterministic kernels and one thread inside the block; the caller's settings after it."""
    threads = torch.get_num_threads()
    strict, warn_only = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)
        try:
            yield
        finally:
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(strict, warn_only=warn_only)
