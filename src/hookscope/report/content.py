"""The page's data: ``Report`` and its views, plain values and PNG bytes, no tensors.

::

    layers, left_out = layer_views(cap, ("output", "grad_output"), max_layers=64, absent=why)
    layers[0].view("grad_output")      # a TensorView: numbers of the batch, a picture of image 0

Its neighbours fill and read it: ``build`` (``build_report``: a model and an input),
``from_store`` (``build_report_from_store``: a store, without the model) and ``html``
(``render_html``, ``write_report``: the page). A layer is drawn the same way from either source,
here, once:

- Layers in forward order (each site's first call), at most ``max_layers``; the caller names the
  rest. A site called several times (a shared activation) shows its first call and says how
  many calls there were. Sites never called are not drawn.
- A layer holds one ``TensorView`` per kind drawn (the kinds of ``hookscope.core.kinds``) that its
  first call holds, and for each of the others why it holds none. A view of a gradient kind
  (``is_gradient``) is drawn with the diverging colormap: red positive, blue negative, pale zero.
- Numbers are ``summarize`` of the first tensor of the kind, the whole batch; pictures show
  image 0: a grid of its first ``GRID_CHANNELS`` maps for 4-D tensors, bars of its first
  ``MAX_VALUES`` values for 2-D ones (and 4-D ones with 1x1 maps), nothing for 3-D (tokens or
  sequences: the shape cannot say which) and other ranks. Maps wider than ``MAX_TILE`` are
  shrunk (area) before drawing, to keep the page small.

The gradient-flow chart is ``hookscope.report.flow``.

Pillow and matplotlib are imported when a picture is drawn (``pip install 'hookscope[viz]'``).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch.nn.functional as F
from torch import Tensor

from ..base.display import Shows, plot_of, table_of
from ..core.call import Call
from ..core.channels import is_channels_last, tokens_to_grid
from ..core.kinds import Kind, is_gradient
from ..core.records import Record, forward_order
from ..errors import ShapeError
from ..explain.targets import top_classes
from ..graph.nodes import Graph
from ..stats.summary import summarize
from ..viz.fragments import png_bytes
from ..viz.images import feature_grid
from .flow import FlowChart

if TYPE_CHECKING:
    from PIL.Image import Image

GRID_CHANNELS = 16  # channels drawn in a layer's feature grid
MAX_TILE = 64  # maps larger than this (pixels a side) are shrunk before drawing
MAX_VALUES = 256  # values drawn as bars for a 2-D tensor


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
    badges: tuple[str, ...] = ()  # per overlay, its faithfulness in words (build_report(faithfulness=True))


@dataclass(frozen=True)
class TensorView:
    """One kind of tensor of a layer (its output, a gradient): numbers for the batch, a picture of image 0."""

    kind: str  # a kind of hookscope.core.kinds: "output", "grad_output", ...
    key: str  # which tensor of the kind: "out", "out[0]", ...
    others: int  # how many more tensors of this kind the call held
    shape: tuple[int, ...]
    dtype: str
    stats: Mapping[str, Any]  # summarize(tensor).as_dict()
    grid: bytes | None  # PNG of image 0's maps
    values: tuple[float, ...]  # image 0's first values, for 2-D tensors
    note: str  # what the picture shows, or why there is none


@dataclass(frozen=True)
class LayerView:
    """One site, from its first call: a view per kind drawn, or why there is none."""

    index: int  # position in forward order
    name: str
    type: str
    calls: int
    tensors: tuple[TensorView, ...]  # the kinds drawn that the call held, in the report's order
    missing: Mapping[str, str]  # kind -> why the call held none of it, for the other kinds drawn

    def view(self, kind: str) -> TensorView | None:
        """The view of ``kind``, or None when the call held none (or it was not drawn)."""
        return next((view for view in self.tensors if view.kind == kind), None)

    @property
    def output(self) -> TensorView | None:
        return self.view("output")

    @property
    def grad(self) -> TensorView | None:
        """The view of ``grad_output``: d score / d output."""
        return self.view("grad_output")


@dataclass(frozen=True)
class Section:
    """A section of the page drawn elsewhere: its anchor, its heading, and its HTML (built escaped)."""

    id: str
    title: str
    html: str


@dataclass(frozen=True)
class Report(Shows):
    """Everything the page shows. PNGs are bytes; ``render_html`` inlines them as data: URIs.

    Attributes:
        title: the page's title.
        model: the model's class name.
        parameters: its parameter count.
        input: the input's shape, dtype and device, in words.
        created: when the report was built, in words.
        version: hookscope's version.
        notes: the caller's notes.
        remarks: hookscope's: what was left out or could not be captured.
        pictures: PNG bytes of the first images of ``x`` (or the pictures given).
        predictions: per image, the top classes and their probabilities.
        cam_layer: the layer the CAMs read (``""`` without CAMs).
        cams: the CAM pictures, per method and image.
        flow: the gradient-flow chart, or None without gradients.
        kinds: the kinds drawn on each layer's card, in order.
        layers: one view per layer shown.
        selected: how many sites the selector picked (shown, left out, never called).
        image_names: one name per picture, or empty (``image 0``, ``image 1``...).
        sections: more sections, after the prediction (patching, similarity, probes...).
        graph: the module graph of the pass, coloured by what was measured, or None.
    """

    title: str
    model: str
    parameters: int
    input: str  # "(1, 3, 224, 224) float32 on cpu"
    created: str
    version: str
    notes: tuple[str, ...]  # the caller's
    remarks: tuple[str, ...]  # hookscope's: what was left out or could not be captured
    pictures: tuple[bytes, ...]  # the first images of x (or the pictures given), PNG
    predictions: tuple[Prediction, ...]
    cam_layer: str  # "" without CAMs
    cams: tuple[CamView, ...]
    flow: FlowChart | None  # the gradient-flow chart
    kinds: tuple[str, ...]  # the kinds drawn on each layer's card, in this order
    layers: tuple[LayerView, ...]
    selected: int  # sites the selector picked (shown, left out, never called)
    image_names: tuple[str, ...] = ()  # one per picture (file names), or none: "image 0", "image 1", ...
    sections: tuple[Section, ...] = ()  # more sections, after the prediction (report/edits.py: patching, ablation)
    graph: Graph | None = None  # the module graph of the pass (hookscope.graph), coloured by what was measured

    def __repr__(self) -> str:
        return f"<Report {self.title!r}: {self.model}, {len(self.layers)} layers, kinds={self.kinds}>"

    def table(self) -> str:
        """A row per layer: type, calls, shape, the mean and std of each kind drawn (text).

        Returns:
            The table, as text.
        """
        return table_of(self)

    def plot(self) -> Image:
        """The page's first picture, the first image explained (a PIL image).

        Returns:
            A PIL image.
        """
        return plot_of(self)

    def image_name(self, index: int) -> str:
        """What the page calls image ``index``: its file name when known, else ``image 0``.

        Args:
            index: the image's index in the batch.

        Returns:
            Its file name when known, else ``image {index}``.
        """
        return self.image_names[index] if index < len(self.image_names) else f"image {index}"

    @property
    def grads(self) -> bool:
        """Whether the page draws a gradient kind."""
        return any(is_gradient(kind) for kind in self.kinds)


def coloured(graph: Graph | None, flow: FlowChart | None) -> Graph | None:
    """The page's graph, coloured by each layer's mean |gradient| (the flow chart's bars) when there is one,
    else by the bytes each module's forward left saved for the backward."""
    if graph is None:
        return None
    if flow is not None:
        return graph.colored({bar.name: bar.mean_abs for bar in flow.bars}, column="mean |grad_output|")
    saved = {node.name: float(node.saved) for node in graph.leaves()}
    return graph.colored(saved, column="bytes saved for backward")


def layer_views(
    sites: Mapping[str, Record],
    kinds: Sequence[Kind],
    *,
    max_layers: int,
    absent: Callable[[str], str],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[LayerView], list[str]]:
    """The called sites in forward order, at most ``max_layers``, and the names of the rest.

    Each view holds ``kinds`` of the site's first call; ``absent(kind)`` says why a call holds
    none of a kind when the capture left no reason. ``progress(done, total)`` is called with
    ``done=0`` first, then after each layer. Each record's ``channels`` (its module's channel count,
    from the weights) tells channels-last maps ``(B, H, W, C)`` from channels-first ones when drawing them.
    """
    called = [record for record in forward_order(sites) if record.calls]
    shown = called[:max_layers]
    views = []
    if progress is not None:
        progress(0, len(shown))
    for i, record in enumerate(shown):
        call = record.calls[0]
        views_ = (tensor_view(call, kind, channels=record.channels) for kind in kinds)
        tensors = [view for view in views_ if view is not None]
        held = {view.kind for view in tensors}
        missing: dict[str, str] = {k: call.missing.get(k) or absent(k) for k in kinds if k not in held}
        views.append(LayerView(i, record.name, record.type, len(record.calls), tuple(tensors), missing))
        if progress is not None:
            progress(i + 1, len(shown))
    return views, [record.name for record in called[max_layers:]]


def not_held(kind: str) -> str:
    """Why a call holds none of ``kind`` when the capture left no reason."""
    if is_gradient(kind):
        return "no gradient reached it"
    return {"input": "it received no tensor", "output": "it returned no tensor"}.get(kind, f"it held no {kind}")


def tensor_view(call: Call, kind: Kind, *, channels: int | None = None) -> TensorView | None:
    """The first tensor of ``kind`` in ``call`` as numbers and a picture; None when it holds none.
    ``channels``: the module's channel count, which tells a channels-last map (drawn permuted)."""
    keys = call.keys(kind)
    if not keys:
        return None
    tensor = call.tensors[kind][keys[0]]
    last = is_channels_last(tensor.shape, channels)
    grid, values, note = picture_of(tensor, diverging=is_gradient(kind), channels_last=last, channels=channels)
    return TensorView(
        kind=kind,
        key=keys[0],
        others=len(keys) - 1,
        shape=tuple(tensor.shape),
        dtype=str(tensor.dtype).removeprefix("torch."),
        stats=summarize(tensor).as_dict(),
        grid=grid,
        values=values,
        note=note,
    )


def picture_of(
    tensor: Tensor, *, diverging: bool, channels_last: bool = False, channels: int | None = None
) -> tuple[bytes | None, tuple[float, ...], str]:
    """Image 0 of a layer's tensor as a feature grid (4-D, or ViT tokens on their patch grid), value bars
    (2-D) or nothing, and a caption. ``channels_last``: a 4-D tensor is ``(B, H, W, C)`` (drawn as its
    channels-first permutation); ``channels``: the module's channel count (a ``(B, C, L)`` map is no tokens)."""
    if channels_last and tensor.dim() == 4:
        tensor = tensor.permute(0, 3, 1, 2)  # (B, C, H, W)
    layout = ""
    if tensor.dim() == 3 and (found := token_grid(tensor, channels)) is not None:
        tensor, layout = found
    if tensor.dim() == 4 and tensor.shape[2] * tensor.shape[3] == 1:
        tensor = tensor.flatten(1)  # (B, C, 1, 1): one number per channel reads better as bars
    if tensor.dim() == 2 and tensor.shape[0] and tensor.shape[1]:
        first = tensor[0, :MAX_VALUES].detach().double().cpu()
        values = tuple(float(v) if math.isfinite(v) else 0.0 for v in first.tolist())
        return None, values, f"image 0, values 0-{len(values) - 1} of {tensor.shape[1]}"
    if tensor.dim() != 4:
        what = "tokens or a sequence" if tensor.dim() == 3 else "not maps"
        return None, (), f"{tensor.dim()}-D output ({what}): no picture"
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
    return png(grid), (), f"image 0, channels 0-{maps.shape[1] - 1} of {tensor.shape[1]}{shrunk}{layout}"


def token_grid(tensor: Tensor, channels: int | None) -> tuple[Tensor, str] | None:
    """``(B, P + h*w, D)`` tokens as ``(B, D, h, w)`` maps on their patch grid, as the CAMs read them
    (``core.channels.tokens_to_grid``), and the caption's words; None for a sequence that is no grid."""
    if channels is not None and tensor.shape[1] == channels:
        return None  # (B, C, L): a Conv1d's maps
    try:
        maps = tokens_to_grid(tensor)
    except ShapeError:
        return None
    h, w = maps.shape[2:]
    if h < 4:  # tokens_to_grid's guess is unambiguous from 4 x 4 patches on
        return None
    prefix = tensor.shape[1] - h * w
    skipped = f" after {prefix} leading token{'s' if prefix > 1 else ''}" if prefix else ""
    return maps, f"; tokens drawn as a {h}x{w} patch grid{skipped}"


def human_time(moment: datetime.datetime) -> str:
    """``2025-03-14 09:26 CET``: a report's date, to the minute, with its time zone."""
    return moment.strftime("%Y-%m-%d %H:%M %Z").rstrip()


def png(image: Image) -> bytes:
    """``image`` as PNG bytes."""
    return png_bytes(image)


def predictions(scores_2d: Tensor, labels: Sequence[str] | None, top_k: int) -> tuple[Prediction, ...]:
    """The top-k classes of each row of ``(B, classes)`` scores with their softmax probability (float64),
    ranked as the explained top-1 is (``top_classes``: of tied scores, the lowest index first)."""
    probabilities = scores_2d.double().softmax(dim=1)  # (B, classes)
    top = top_classes(scores_2d, min(top_k, scores_2d.shape[1]))  # (B, k)
    return tuple(
        Prediction(i, tuple(Guess(int(c), class_name(int(c), labels), float(row[c])) for c in classes))
        for i, (row, classes) in enumerate(zip(probabilities, top, strict=True))
    )


def class_name(index: int, labels: Sequence[str] | None) -> str:
    """A class as the page names it: its label, or ``class 285`` without one."""
    return labels[index] if labels is not None and index < len(labels) else f"class {index}"
