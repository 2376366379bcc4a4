"""What a report shows, built from one model and one input: ``build_report`` -> ``Report``.

::

    report = build_report(model, x, select="layer*", grads=True, labels=labels, notes=["random init"])
    write_report(report, "report")     # hookscope.page: report/index.html, one self-contained file

``build_report`` does the work (one captured forward pass, one backward pass with ``grads``, the
CAMs) and returns a ``Report``: plain values and PNG bytes, no tensors. ``hookscope.page`` turns
it into one page and writes it.

What the page shows, and the choices behind it:

- Layers in forward order (each site's first call), at most ``max_layers``; the page names the
  rest. A site called several times (a shared activation) shows its first call and says how
  many calls there were. Sites never called are listed in the remarks, not drawn.
- Numbers are ``summarize`` of the first tensor of the first call, the whole batch; pictures
  show image 0: a grid of its first ``GRID_CHANNELS`` maps for 4-D outputs, bars of its first
  ``MAX_VALUES`` values for 2-D outputs (and 4-D ones with 1x1 maps), nothing for 3-D (tokens
  or sequences: the shape cannot say which) and other ranks. Maps wider than ``MAX_TILE`` are
  shrunk (area) before drawing, to keep the page small.
- Gradients (``grads=True``): d score / d output of each layer, where the score is the sum of
  the target logits (each image's top-1 when ``target`` is None), taken with
  ``torch.autograd.grad`` on a copy of ``x``: nothing lands in ``param.grad``.
- Predictions, pictures and CAMs cover the first ``MAX_IMAGES`` images of the batch.
- What could not be captured (``CaptureWarning``) becomes a remark on the page, not a warning.

Jinja2, Pillow and matplotlib are imported when a report is built or rendered
(``pip install 'hookscope[viz]' jinja2``).
"""

from __future__ import annotations

import datetime
import io
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.capture import Capture, capture
from ..core.select import Selector
from ..errors import CaptureWarning, OptionError, SelectionError, ShapeError
from ..explain.cam import METHODS, cam, pick_layer
from ..explain.targets import Target, class_indices, logits, scores
from ..stats.summary import forward_order, gradient_flow, summarize
from ..viz.charts import gradient_flow_plot
from ..viz.images import feature_grid, overlay, to_pil

if TYPE_CHECKING:
    from PIL.Image import Image

GRID_CHANNELS = 16  # channels drawn in a layer's feature grid
MAX_TILE = 64  # maps larger than this (pixels a side) are shrunk before drawing
MAX_VALUES = 256  # values drawn as bars for a 2-D output
MAX_IMAGES = 8  # images of the batch that get a prediction, a picture and CAMs
PICTURE_SIDE = (192, 448)  # pictures are enlarged (nearest) or shrunk to fit these sides

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Guess:
    """One of an image's top-k classes."""

    index: int
    name: str
    probability: float


@dataclass(frozen=True)
class Prediction:
    """The top-k classes of one image of the batch, most probable first."""

    image: int
    guesses: tuple[Guess, ...]


@dataclass(frozen=True)
class CamView:
    """The heatmaps of one image: one overlay PNG per method, for one class."""

    image: int
    target: str  # "Egyptian Mau #285", "class 285" without labels, "custom target" for a callable
    overlays: tuple[tuple[str, bytes], ...]  # (method, PNG)


@dataclass(frozen=True)
class TensorView:
    """One tensor of a layer (its output or gradient): numbers for the batch, a picture of image 0."""

    key: str  # which tensor of the call: "out", "out[0]", ...
    others: int  # how many more tensors of this kind the call held
    shape: tuple[int, ...]
    dtype: str
    stats: Mapping[str, Any]  # summarize(tensor).as_dict()
    grid: bytes | None  # PNG of image 0's maps
    values: tuple[float, ...]  # image 0's first values, for 2-D outputs
    note: str  # what the picture shows, or why there is none


@dataclass(frozen=True)
class LayerView:
    """One site, from its first call."""

    index: int  # position in forward order
    name: str
    type: str
    calls: int
    output: TensorView | None
    grad: TensorView | None
    missing: str  # why output or grad is None


@dataclass(frozen=True)
class Report:
    """Everything the page shows. PNGs are bytes; ``render_html`` inlines them as data: URIs."""

    title: str
    model: str
    parameters: int
    input: str  # "(1, 3, 224, 224) float32 on cpu"
    created: str
    version: str
    notes: tuple[str, ...]  # the caller's
    remarks: tuple[str, ...]  # hookscope's: what was left out or could not be captured
    pictures: tuple[bytes, ...]  # the first MAX_IMAGES images of x (or the pictures given), PNG
    predictions: tuple[Prediction, ...]
    cam_layer: str  # "" without CAMs
    cams: tuple[CamView, ...]
    flow: bytes | None  # the gradient-flow chart, PNG
    layers: tuple[LayerView, ...]
    selected: int  # sites the selector picked (shown, left out, never called)
    grads: bool


def build_report(
    model: nn.Module,
    x: Tensor,
    *,
    select: Selector | None = None,
    grads: bool = False,
    pictures: Sequence[Image] | None = None,
    labels: Sequence[str] | None = None,
    target: Target = None,
    cam_methods: Sequence[str] = ("gradcam",),
    top_k: int = 5,
    title: str = "hookscope report",
    notes: Sequence[str] = (),
    max_layers: int = 64,
    progress: Progress | None = None,
) -> Report:
    """Run ``model(x)`` once under a capture of ``select`` and gather what the page shows.

    ``pictures`` (one per image of ``x``) are what the CAMs are drawn over; by default ``x``
    itself, min-max scaled. ``labels`` name the classes. ``target`` is what gradients and CAMs
    explain (see ``hookscope.targets``; None: each image's top-1). ``progress(stage, done,
    total)`` is called at the start of each stage that runs (``forward``, ``layers``, then
    ``cam`` with CAMs and ``flow`` with ``grads``) with ``done=0``, and after each of its steps.
    """
    _check_options(x, pictures, cam_methods, top_k, max_layers)
    if grads and not x.is_floating_point():
        raise OptionError(f"grads=True differentiates with respect to x, which must be floating point, got {x.dtype}")
    step = progress or _quiet
    step("forward", 0, 1)
    cap, output, remarks = _run(model, x, select, grads, target)
    step("forward", 1, 1)
    scores_2d = _class_scores(output, labels)
    layers, left_out = _layers(cap, max_layers, grads, step)
    shown = min(len(x), MAX_IMAGES)
    images = _pictures(x[:shown], pictures[:shown] if pictures is not None else None)
    cam_layer, cams = _cams(model, x[:shown], images, cam_methods, target, scores_2d, labels, step, remarks)
    return Report(
        title=title,
        model=type(model).__name__,
        parameters=sum(p.numel() for p in model.parameters()),
        input=f"{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')} on {x.device}",
        created=datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        version=_version(),
        notes=tuple(notes),
        remarks=tuple(_general_remarks(model, x, scores_2d, left_out) + remarks),
        pictures=tuple(_png(image) for image in images),
        predictions=_predictions(scores_2d[:shown], labels, top_k) if scores_2d is not None else (),
        cam_layer=cam_layer,
        cams=cams,
        flow=_flow(cap, step) if grads else None,
        layers=tuple(layers),
        selected=len(cap),
        grads=grads,
    )


# -- the captured pass ------------------------------------------------------------------------
def _run(
    model: nn.Module, x: Tensor, select: Selector | None, grads: bool, target: Target
) -> tuple[Capture, Any, list[str]]:
    """One forward pass under the capture (and a backward one with ``grads``); its CaptureWarnings as text."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CaptureWarning)
        if grads:
            with torch.inference_mode(False), torch.enable_grad():  # also under the caller's no_grad
                leaf = x.detach().clone().requires_grad_(True)
                with capture(model, select, kinds=("output", "grad_output")) as cap:
                    output = model(leaf.clone())  # a copy: the model may change its input in place
                    picked, _ = scores(output, target)
                    torch.autograd.grad(picked.sum(), leaf)  # nothing lands in param.grad
        else:
            with capture(model, select) as cap, torch.no_grad():
                output = model(x)
    remarks = []
    for warning in caught:
        if issubclass(warning.category, CaptureWarning):
            remarks.append(str(warning.message).removeprefix("hookscope: "))
        else:  # not ours to swallow
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return cap, output, remarks


def _class_scores(output: Any, labels: Sequence[str] | None) -> Tensor | None:
    """The model's (B, classes) output, or None when it returns something else."""
    out = logits(output).detach()
    if out.dim() != 2 or not out.is_floating_point():
        return None
    if labels is not None and len(labels) != out.shape[1]:
        raise OptionError(f"got {len(labels)} labels but the model returns {out.shape[1]} classes; pass one per class")
    return out


def _predictions(scores_2d: Tensor, labels: Sequence[str] | None, top_k: int) -> tuple[Prediction, ...]:
    probabilities = scores_2d.double().softmax(dim=1)  # (B, classes)
    top = probabilities.topk(min(top_k, probabilities.shape[1]), dim=1)
    return tuple(
        Prediction(i, tuple(Guess(int(c), _class_name(int(c), labels), float(p)) for p, c in zip(*row, strict=True)))
        for i, row in enumerate(zip(top.values, top.indices, strict=True))
    )


def _general_remarks(model: nn.Module, x: Tensor, scores_2d: Tensor | None, left_out: list[str]) -> list[str]:
    remarks = []
    if model.training:
        remarks.append(
            "the model is in training mode: BatchNorm used batch statistics (and updated its running ones) and "
            "Dropout was active; call model.eval() first"
        )
    if scores_2d is None:
        remarks.append("the model's output is not (batch, classes): no predictions")
    if len(x) > MAX_IMAGES:
        remarks.append(f"the batch has {len(x)} images; predictions and CAMs show the first {MAX_IMAGES}")
    if left_out:
        named = ", ".join(left_out[:5]) + (", ..." if len(left_out) > 5 else "")
        remarks.append(f"{len(left_out)} more layers were captured but left out (max_layers): {named}")
    return remarks


# -- layers -----------------------------------------------------------------------------------
def _layers(cap: Capture, max_layers: int, grads: bool, step: Progress) -> tuple[list[LayerView], list[str]]:
    """The called sites in forward order, at most ``max_layers``, and the names of the rest."""
    called = [record for record in forward_order(cap) if record.calls]
    shown = called[:max_layers]
    views = []
    step("layers", 0, len(shown))
    for i, record in enumerate(shown):
        call = record.calls[0]
        output = _tensor_view(call.tensors.get("output", {}), call.keys("output"), diverging=False)
        grad = _tensor_view(call.tensors.get("grad_output", {}), call.keys("grad_output"), diverging=True)
        missing = "it returned no tensor" if output is None else ""
        if grads and grad is None and output is not None:
            missing = call.missing.get("grad_output", "no gradient reached it")
        views.append(LayerView(i, record.name, record.type, len(record.calls), output, grad, missing))
        step("layers", i + 1, len(shown))
    return views, [record.name for record in called[max_layers:]]


def _tensor_view(held: Mapping[str, Tensor], keys: list[str], *, diverging: bool) -> TensorView | None:
    if not keys:
        return None
    tensor = held[keys[0]]
    grid, values, note = _picture_of(tensor, diverging=diverging)
    return TensorView(
        key=keys[0],
        others=len(keys) - 1,
        shape=tuple(tensor.shape),
        dtype=str(tensor.dtype).removeprefix("torch."),
        stats=summarize(tensor).as_dict(),
        grid=grid,
        values=values,
        note=note,
    )


def _picture_of(tensor: Tensor, *, diverging: bool) -> tuple[bytes | None, tuple[float, ...], str]:
    """Image 0 of a layer's tensor as a feature grid (4-D), value bars (2-D) or nothing, and a caption."""
    if tensor.dim() == 4 and tensor.shape[2] * tensor.shape[3] == 1:
        tensor = tensor.flatten(1)  # (B, C, 1, 1): one number per channel reads better as bars
    if tensor.dim() == 2 and tensor.shape[0] and tensor.shape[1]:
        first = tensor[0, :MAX_VALUES].detach().double().cpu()
        values = tuple(float(v) if math.isfinite(v) else 0.0 for v in first.tolist())
        return None, values, f"image 0, values 0-{len(values) - 1} of {tensor.shape[1]}"
    if tensor.dim() != 4:
        kind = "tokens or a sequence" if tensor.dim() == 3 else "not maps"
        return None, (), f"{tensor.dim()}-D output ({kind}): no picture"
    maps = tensor[:1, :GRID_CHANNELS].detach().cpu().double()  # (1, k, H, W)
    side = max(maps.shape[2:])
    if side > MAX_TILE:
        size = tuple(max(1, round(s * MAX_TILE / side)) for s in maps.shape[2:])
        maps = F.interpolate(maps, size=size, mode="area")
    try:
        grid = feature_grid(maps[0], channels=None, diverging=diverging)
    except ShapeError as err:
        return None, (), f"no picture: {err}"
    shrunk = (
        f", {tensor.shape[2]}x{tensor.shape[3]} maps drawn at {maps.shape[2]}x{maps.shape[3]}"
        if side > MAX_TILE
        else ""
    )
    return _png(grid), (), f"image 0, channels 0-{maps.shape[1] - 1} of {tensor.shape[1]}{shrunk}"


def _flow(cap: Capture, step: Progress) -> bytes | None:
    step("flow", 0, 1)
    rows = gradient_flow(cap)
    chart = _png(gradient_flow_plot(rows)) if rows else None
    step("flow", 1, 1)
    return chart


# -- pictures and CAMs ------------------------------------------------------------------------
def _pictures(x: Tensor, given: Sequence[Image] | None) -> list[Image]:
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


def _cams(
    model: nn.Module,
    x: Tensor,
    pictures: list[Image],
    methods: Sequence[str],
    target: Target,
    scores_2d: Tensor | None,
    labels: Sequence[str] | None,
    step: Progress,
    remarks: list[str],
) -> tuple[str, tuple[CamView, ...]]:
    """(layer, one CamView per image) for each of ``methods``; ("", ()) with a remark when impossible."""
    if not methods:
        return "", ()
    reason = _why_no_cam(x, pictures, target, scores_2d)
    try:
        layer, call = pick_layer(model, x) if not reason else ("", 0)
    except SelectionError as err:
        reason = str(err)
    if reason:
        remarks.append(f"no CAM: {reason}")
        return "", ()
    classes = None
    if scores_2d is not None and not callable(target):
        classes = class_indices(scores_2d, target)[: len(x)].tolist()
    heats = []
    step("cam", 0, len(methods))
    for i, method in enumerate(methods):
        heats.append(cam(model, x, method, classes if classes is not None else target, layer=layer, call=call))
        step("cam", i + 1, len(methods))
    views = tuple(
        CamView(
            image=i,
            target="custom target" if classes is None else _class_title(classes[i], labels),
            overlays=tuple((m, _png(overlay(picture, heat[i]))) for m, heat in zip(methods, heats, strict=True)),
        )
        for i, picture in enumerate(pictures)
    )
    return (layer if call == 0 else f"{layer} (call {call})"), views


def _why_no_cam(x: Tensor, pictures: list[Image], target: Target, scores_2d: Tensor | None) -> str:
    if x.dim() != 4 or not pictures:
        return f"the input {tuple(x.shape)} is not a batch of images (B, C, H, W)"
    if scores_2d is None and not callable(target):
        return "the model's output is not (batch, classes); pass a callable target"
    return ""


def _class_name(index: int, labels: Sequence[str] | None) -> str:
    return labels[index] if labels is not None else f"class {index}"


def _class_title(index: int, labels: Sequence[str] | None) -> str:
    """A CAM row's title: ``Egyptian Mau #285``, or ``class 285`` without labels."""
    return f"{labels[index]} #{index}" if labels is not None else f"class {index}"


# -- checks and small helpers -------------------------------------------------------------------
def _check_options(
    x: Tensor, pictures: Sequence[Image] | None, methods: Sequence[str], top_k: int, max_layers: int
) -> None:
    if not isinstance(x, Tensor) or x.dim() == 0:
        raise OptionError(f"x must be a batch tensor (B, ...), got {type(x).__name__} {getattr(x, 'shape', '')}")
    if isinstance(methods, str):
        raise OptionError(f"cam_methods must be a list of method names, got the string {methods!r}; pass [{methods!r}]")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise OptionError(f"unknown CAM method(s) {', '.join(map(repr, unknown))}; methods are {', '.join(METHODS)}")
    if pictures is not None and len(pictures) != len(x):
        raise OptionError(f"got {len(pictures)} pictures for a batch of {len(x)}; pass one per image, or None")
    for name, value in (("top_k", top_k), ("max_layers", max_layers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OptionError(f"{name} must be a positive int, got {value!r}")


def _quiet(stage: str, done: int, total: int) -> None:
    pass


def _version() -> str:
    from .._version import __version__

    return __version__


def _png(image: Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
