"""Draws the pictures shown in the user guide, docs/guide/ (ImageNet EfficientNet-Lite0, CC0 photos).

Run inside the venv:

    python examples/pictures.py                 # writes them into examples/output/pictures/
    python examples/pictures.py --out FOLDER    # into FOLDER
    python examples/pictures.py --docs          # regenerates the guide's tracked docs/images/
"""

from __future__ import annotations

import argparse
from pathlib import Path

import skimage.data
import torch
from PIL import Image

import hookscope

DOCS = Path(__file__).resolve().parent.parent / "docs" / "images"
OUTPUT = Path(__file__).resolve().parent / "output"  # every example writes under examples/output/ (ignored)


def where() -> Path:
    """The folder to draw into: ``--out FOLDER`` (default ``examples/output/pictures/``),
    or the tracked docs/images with ``--docs``."""
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--out", default=str(OUTPUT / "pictures"), help="the folder to write the pictures into")
    options.add_argument("--docs", action="store_true", help="write the guide's docs/images/ instead")
    args = options.parse_args()
    return DOCS if args.docs else Path(args.out)


def main() -> None:
    out = where()
    out.mkdir(parents=True, exist_ok=True)
    model = hookscope.zoo.efficientnet_lite0()
    cat, cup = skimage.data.chelsea(), skimage.data.coffee()
    x = torch.cat([hookscope.zoo.lite_input(cat), hookscope.zoo.lite_input(cup)], dim=3)  # cat | cup
    photo = hookscope.zoo.lite_picture(x[0])

    with hookscope.capture(
        model, ["_blocks.3", "_conv_head", "_blocks.*._project_conv"], kinds=("output", "grad_output")
    ) as cap:
        model(x)[:, 285].sum().backward()
    hookscope.feature_grid(cap["_blocks.3"].output[0], channels=24, pick="top_var").save(out / "features.png")
    hookscope.feature_grid(cap["_blocks.3"].grad_output[0], channels=24, pick="top_var", diverging=True).save(
        out / "gradients.png"
    )
    hookscope.gradient_flow_plot({k: v for k, v in cap.items() if k.endswith("_project_conv")}).save(out / "flow.png")

    rows = [
        hookscope.overlay(photo, hookscope.cam(model, x, method, target)[0])
        for method in ("gradcam", "gradcam++", "layercam")
        for target in (285, 967)
    ]
    width, height = rows[0].size
    sheet = Image.new("RGB", (2 * width + 8, 3 * height + 16), "white")
    for i, row in enumerate(rows):
        sheet.paste(row, ((i % 2) * (width + 8), (i // 2) * (height + 8)))
    sheet.save(out / "cams.jpg", quality=85)


if __name__ == "__main__":
    main()
