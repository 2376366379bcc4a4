"""Draws rollout.jpg: attention rollout of a small ViT trained here on the digits.

    python examples/rollout_digits.py                 # writes examples/output/rollout-digits/rollout.jpg
    python examples/rollout_digits.py --out FOLDER    # writes FOLDER/rollout.jpg
    python examples/rollout_digits.py --docs          # regenerates the guide's docs/images/rollout.jpg
    python examples/rollout_digits.py --quick         # 3 epochs, not 12: a rougher map in half the time

A torchvision ``VisionTransformer`` (32 x 32 input, 4 x 4 patches, 3 layers, 3 heads, 48 wide) is
trained for a minute on one CPU thread on scikit-learn's handwritten digits (the train split
hookscope's LeNet uses), then ``hookscope.attention_rollout`` is drawn under eight test digits:
the class token's attention, rolled out through the layers, over the patches it read. There is
no pretrained ViT that ships offline, and a random one's rollout is noise, hence the training.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from PIL import Image

import hookscope
from hookscope.zoo.lenet import digits

DOCS = Path(__file__).resolve().parent.parent / "docs" / "images"
OUTPUT = Path(__file__).resolve().parent / "output"  # every example writes under examples/output/ (ignored)
EPOCHS, QUICK, BATCH, SHOWN, SCALE = 12, 3, 64, 8, 4


def train(epochs: int = EPOCHS) -> tuple[torch.nn.Module, float]:
    """The ViT trained for ``epochs`` (eval mode) and its test accuracy."""
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=4, num_layers=3, num_heads=3, hidden_dim=48, mlp_dim=96, num_classes=10
    )
    x, y = digits("train")
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    for _ in range(epochs):
        for batch in torch.randperm(len(x)).split(BATCH):
            loss = F.cross_entropy(model(x[batch].expand(-1, 3, -1, -1)), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    test_x, test_y = digits("test")
    with torch.no_grad():
        accuracy = (model(test_x.expand(-1, 3, -1, -1)).argmax(1) == test_y).float().mean().item()
    return model, accuracy


def arguments() -> argparse.Namespace:
    """The command line: ``--out FOLDER``, ``--docs``, ``--quick``."""
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--out", default=str(OUTPUT / "rollout-digits"), help="the folder to write rollout.jpg into")
    options.add_argument("--docs", action="store_true", help="write the guide's docs/images/rollout.jpg instead")
    quick = f"train {QUICK} epochs instead of {EPOCHS}: a rougher map in half the time (the tests' mode)"
    options.add_argument("--quick", action="store_true", help=quick)
    return options.parse_args()


def where(args: argparse.Namespace | None = None) -> Path:
    """The picture: ``--out FOLDER`` (default ``examples/output/rollout-digits/``),
    or the tracked docs/images with ``--docs``."""
    args = arguments() if args is None else args
    return (DOCS if args.docs else Path(args.out)) / "rollout.jpg"


def main() -> None:
    args = arguments()
    out = where(args)
    torch.set_num_threads(1)
    model, accuracy = train(QUICK if args.quick else EPOCHS)
    x, _ = digits("test")
    x = x[:SHOWN].expand(-1, 3, -1, -1)
    heat = hookscope.attention_rollout(model, x).maps  # (8, 8, 8): the patch grid
    ink = (x[:, 0] - x[:, 0].amin()) / (x[:, 0].amax() - x[:, 0].amin())  # (8, 32, 32) in [0, 1]
    paper = F.interpolate(1 - ink[:, None], scale_factor=SCALE, mode="nearest")[:, 0]  # black ink on white
    side, gap = paper.shape[-1], 4
    sheet = Image.new("RGB", (SHOWN * side + (SHOWN - 1) * gap, 2 * side + gap), (255, 255, 255))
    for i, (digit, h) in enumerate(zip(paper, heat, strict=True)):
        picture = digit.expand(3, -1, -1)  # (3, 128, 128)
        sheet.paste(hookscope.overlay(picture, h, alpha=0.0), (i * (side + gap), 0))  # the digit itself
        sheet.paste(hookscope.overlay(picture, h, alpha=0.5), (i * (side + gap), side + gap))
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out, quality=85)
    print(f"test accuracy {accuracy:.3f}; wrote {out}")


if __name__ == "__main__":
    main()
