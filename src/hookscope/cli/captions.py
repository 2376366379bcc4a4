"""The captions of ``hookscope cam --panel``: the class explained, the method, and the layer read; and
the lines ``hookscope report`` prints for the choices it made on the user's behalf.

``image | heatmap | overlay`` (``hookscope.viz.images.panel``) are captioned ``class 285: Egyptian
cat``, ``gradcam``, ``at features.6``, so a panel found later in a folder still says what it shows.
The class is ``--target`` or the model's top-1 (as ``cam`` explains it); the layer is ``--layer``,
or the one ``cam`` picks without it (``hookscope.explain.layers.choose_layer``), which is then
passed on so the heatmap and its caption cannot disagree.

``report_choices`` says on stderr, one line each in the flags' words, which output of a tuple or
dict the report explains and the class its CAMs explain; ``in_flag_words``
spells the page's remarks the same way (``--output logits``, not ``output="out['logits']"``).
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings
from collections.abc import Sequence

import torch
from torch import nn

from ..errors import CaptureWarning
from ..explain.layers import choose_layer
from ..explain.targets import logits
from ..report.content import Report
from .outputs import cli_flags

EXPLAINED = "explained: "  # the remark build_report makes when it picks one tensor of a tuple or dict


def chosen_layer(model: nn.Module, x: torch.Tensor, layer: str | None) -> tuple[str | None, int | None]:
    """``(--layer, None)``, or the layer and call ``cam`` reads without it (logged, as ``cam`` logs it)."""
    if layer is not None:
        return layer, None
    choice = choose_layer(model, x)
    return choice.layer, choice.call


def panel_labels(
    args: argparse.Namespace, model: nn.Module, x: torch.Tensor, layer: str, labels: Sequence[str] | None
) -> tuple[str, str, str]:
    """The three captions of the first image's panel: its class, the method, the layer."""
    if callable(args.target):  # --target sum, an index, file.py:function (hookscope.cli.target_flag)
        named = getattr(args.target, "text", getattr(args.target, "__name__", "custom"))
        return f"target {named}", args.method, f"at {layer}"
    index = args.target if args.target is not None else _top1(model, x[:1], args.output)
    name = f": {labels[index]}" if labels is not None and 0 <= index < len(labels) else ""
    return f"class {index}{name}", args.method, f"at {layer}"


def _top1(model: nn.Module, x: torch.Tensor, output: str | None) -> int:
    """The class ``cam`` explains without ``--target``: the top-1 of the first image."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)  # cam itself says which output it explains
        scores = logits(model(x), output)
    return int(scores.reshape(scores.shape[0], -1)[0].argmax())


def report_choices(report: Report, target: int | None) -> list[str]:
    """What ``hookscope report`` chose without being told, one stderr line each, with the flag that chooses
    (the CAMs' layer is logged by ``explain.layers`` as it is picked)."""
    lines = [cli_flags(r.removeprefix(EXPLAINED)) for r in report.remarks if r.startswith(EXPLAINED)]
    if report.cams and target is None:
        lines.append("CAMs explain each image's top-1 class; pass --target N to choose")
    return [f"hookscope: note: {line}" for line in lines]


def in_flag_words(report: Report) -> Report:
    """``report`` with its remarks' advice spelled as flags, for a page written by the command line."""
    return dataclasses.replace(report, remarks=tuple(cli_flags(r) for r in report.remarks))
