"""The page's data: ``Report`` and its views, plain values and PNG bytes, no tensors.

Its neighbours fill and read it: ``build`` (``build_report``: a model and an input),
``from_store`` (``build_report_from_store``: a store, without the model) and ``html``
(``render_html``, ``write_report``: the page). A layer's ``LayerView`` and ``TensorView`` are drawn
by ``hookscope.report.cards``, the same way from either source.

The gradient-flow chart is ``hookscope.report.flow``.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..base.display import Shows, plot_of, table_of
from ..core.kinds import is_gradient
from ..explain.targets import top_classes
from ..graph.nodes import Graph
from .flow import FlowChart

if TYPE_CHECKING:
    from PIL.Image import Image


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


def human_time(moment: datetime.datetime) -> str:
    """``2025-03-14 09:26 CET``: a report's date, to the minute, with its time zone."""
    return moment.strftime("%Y-%m-%d %H:%M %Z").rstrip()


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
