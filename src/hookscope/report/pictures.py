"""The report's pictures and CAMs: one picture per image of the batch, and each CAM method drawn over it.

``pictures_of`` fits each picture to the page (small ones enlarged by a whole factor, nearest; large
ones shrunk); ``cam_views`` runs ``hookscope.cam`` once per method at the layer ``pick_layer`` picks,
or says in a remark why there is no CAM (not a batch of images, no (batch, classes) output).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ..errors import SelectionError
from ..explain.cam import cam
from ..explain.layers import choose_layer
from ..explain.targets import Target, class_indices
from ..faithful.measure import faithfulness
from ..faithful.result import Faithfulness
from ..progress import Callback
from ..viz.images import overlay, to_pil
from .cards import png
from .content import CamView

if TYPE_CHECKING:
    from PIL.Image import Image

PICTURE_SIDE = (192, 448)  # pictures are enlarged (nearest) or shrunk to fit these sides


def pictures_of(x: Tensor, given: Sequence[Image] | None) -> list[Image]:
    """One picture per image: the ones given, or each image of ``x`` min-max scaled; none for non-images."""
    if given is not None:
        return [_fit(to_pil(picture).convert("RGB")) for picture in given]
    if x.dim() != 4 or not x.is_floating_point():
        return []
    return [_fit(to_pil(_as_rgb(image))) for image in x.detach().cpu().double()]


def _as_rgb(image: Tensor) -> Tensor:
    """(C, H, W) -> (3, H, W) in [0, 1]: three channels as they are, anything else as grey."""
    rgb = image if image.shape[0] == 3 else image.mean(dim=0, keepdim=True).expand(3, -1, -1)
    finite = rgb[rgb.isfinite()]
    if not finite.numel():
        return torch.zeros_like(rgb)
    lo, hi = finite.min(), finite.max()
    return torch.nan_to_num((rgb - lo) / (hi - lo) if hi > lo else rgb - lo).clamp(0, 1)


def _fit(picture: Image) -> Image:
    """Small pictures enlarged by a whole factor (nearest), large ones shrunk, to sides in PICTURE_SIDE."""
    low, high = PICTURE_SIDE
    width, height = picture.size
    if min(width, height) < low:
        factor = math.ceil(low / min(width, height))
        return picture.resize((width * factor, height * factor), resample=0)  # 0: nearest
    if max(width, height) > high:
        picture = picture.copy()
        picture.thumbnail((high, high))
    return picture


def cam_views(
    model: nn.Module,
    x: Tensor,
    pictures: list[Image],
    methods: Sequence[str],
    explain: tuple[Target, str],
    scores_2d: Tensor | None,
    labels: Sequence[str] | None,
    step: Callback,
    remarks: list[str],
) -> tuple[str, tuple[CamView, ...], list[Tensor], Target]:
    """(the layer in words, one CamView per image, the maps of each of ``methods``, the target they explain)
    ; ("", (), [], target) with a remark when impossible. ``explain``: the target, and the key of the model's
    output it indexes."""
    target, key = explain
    if not methods:
        return "", (), [], target
    reason = _why_no_cam(x, pictures, target, scores_2d)
    try:
        layer, call, words = choose_layer(model, x) if not reason else ("", 0, "")
    except SelectionError as err:
        reason = str(err)
    if reason:
        remarks.append(f"no CAM: {reason}")
        return "", (), [], target
    classes = None
    if scores_2d is not None and not callable(target):
        classes = class_indices(scores_2d, target)[: len(x)].tolist()
    heats = []
    step("cam", 0, len(methods))
    for i, method in enumerate(methods):
        chosen = classes if classes is not None else target
        heats.append(cam(model, x, method, chosen, select=layer, call=call, output=key))
        step("cam", i + 1, len(methods))
    views = tuple(
        CamView(
            image=i,
            target="custom target" if classes is None else _class_title(classes[i], labels),
            overlays=tuple((m, png(overlay(picture, heat[i]))) for m, heat in zip(methods, heats, strict=True)),
        )
        for i, picture in enumerate(pictures)
    )
    return words.replace("`", ""), views, heats, classes if classes is not None else target


def measured(model: nn.Module, x: Tensor, methods: Sequence[str], heats: list[Tensor], target: Target,
             key: str) -> Faithfulness:  # fmt: skip
    """Deletion and insertion of each CAM (``hookscope.faithfulness``, 20 steps), beside a random and an edge map."""
    return faithfulness(model, x, dict(zip(methods, heats, strict=True)), target=target, output=key,
                        metrics=("deletion", "insertion"))  # fmt: skip


def with_badges(views: tuple[CamView, ...], found: Faithfulness) -> tuple[CamView, ...]:
    """Each CAM's overlay captioned with its deletion and insertion AUCs on that image."""

    def badge(method: str, image: int) -> str:
        scores = found[method]
        assert scores.deletion_auc is not None
        assert scores.insertion_auc is not None
        return f"deletion {scores.deletion_auc[image]:.2f} · insertion {scores.insertion_auc[image]:.2f}"

    return tuple(
        replace(view, badges=tuple(badge(method, view.image) for method, _ in view.overlays)) for view in views
    )


def _why_no_cam(x: Tensor, pictures: list[Image], target: Target, scores_2d: Tensor | None) -> str:
    if x.dim() != 4 or not pictures:
        return f"the input {tuple(x.shape)} is not a batch of images (B, C, H, W)"
    if scores_2d is None and not callable(target):
        return "the model's output is not (batch, classes); pass a callable target"
    return ""


def _class_title(index: int, labels: Sequence[str] | None) -> str:
    """A CAM row's title: ``Egyptian Mau #285``, or ``class 285`` without labels."""
    return f"{labels[index]} #{index}" if labels is not None else f"class {index}"
