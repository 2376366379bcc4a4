"""docs/images/faithfulness.png: deletion and insertion curves of two CAMs and a saliency map of
EfficientNet-Lite0 on the bundled CC0 cat, beside a random and an edge map (docs/guide/pictures.md's example).

    .venv/bin/python examples/faithfulness_picture.py [OUT.png]
"""

from __future__ import annotations

import sys

import skimage.data

import hookscope


def main(out: str = "docs/images/faithfulness.png") -> None:
    model = hookscope.zoo.efficientnet_lite0()
    x = hookscope.zoo.lite_input(skimage.data.chelsea(), 160)
    maps = {method: hookscope.cam(model, x, method) for method in ("gradcam", "layercam")}
    maps["saliency"] = hookscope.attribute(model, x)
    result = hookscope.faithfulness(model, x, maps, metrics=("deletion", "insertion"), steps=10)
    print(result.table())
    result.plot().save(out)
    print(out)


if __name__ == "__main__":
    main(*sys.argv[1:])
