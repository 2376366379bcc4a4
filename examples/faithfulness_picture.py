"""Draws faithfulness.png: deletion and insertion curves of two CAMs and a saliency map of EfficientNet-Lite0.

    python examples/faithfulness_picture.py                 # writes examples/output/faithfulness/faithfulness.png
    python examples/faithfulness_picture.py --out FOLDER    # writes FOLDER/faithfulness.png
    python examples/faithfulness_picture.py --docs          # regenerates the guide's docs/images/faithfulness.png

On the bundled CC0 cat, beside a random and an edge map (docs/guide/pictures.md's example).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import skimage.data

import hookscope

DOCS = Path(__file__).resolve().parent.parent / "docs" / "images"
OUTPUT = Path(__file__).resolve().parent / "output"  # every example writes under examples/output/ (ignored)


def where() -> Path:
    """The file to draw: ``faithfulness.png`` in ``--out FOLDER`` (default ``examples/output/faithfulness/``),
    or in docs/images with ``--docs``."""
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--out", default=str(OUTPUT / "faithfulness"), help="the folder to write it into")
    options.add_argument("--docs", action="store_true", help="write the guide's docs/images/faithfulness.png instead")
    args = options.parse_args()
    return (DOCS if args.docs else Path(args.out)) / "faithfulness.png"


def main() -> None:
    out = where()
    out.parent.mkdir(parents=True, exist_ok=True)
    model = hookscope.zoo.efficientnet_lite0()
    x = hookscope.zoo.lite_input(skimage.data.chelsea(), 160)
    maps = {method: hookscope.cam(model, x, method) for method in ("gradcam", "layercam")}
    maps["saliency"] = hookscope.attribute(model, x)
    result = hookscope.faithfulness(model, x, maps, metrics=("deletion", "insertion"), steps=10)
    print(result.table())
    result.plot().save(out)
    print(out)


if __name__ == "__main__":
    main()
