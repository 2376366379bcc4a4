"""A report of one model on one input: ``build_report(model, x) -> Report``.

::

    report = build_report(model, x, select="layer*", grads=True, labels=labels, notes=["random init"])
    write_report(report, "report")     # hookscope.report.html: report/index.html, one self-contained file

``build_report`` does the work (one captured forward pass, one backward pass with ``grads``, the
predictions, the CAMs, the remarks) and returns a ``Report`` of ``hookscope.report.content``, which
also draws the layers (the same way for ``from_store``'s report of a store); ``html`` turns it
into one page and writes it.

What it adds to the layers, and the choices behind it:

- The kinds drawn on each card are asked for: ``kinds=`` (per-call kinds of
  ``hookscope.core.kinds``), by default ``output``, and ``grad_output`` with ``grads``.
- Gradients (``grads=True``): d score / d tensor at each layer, where the score is the sum of
  the target logits (each image's top-1 when ``target`` is None), taken with
  ``torch.autograd.grad`` on a copy of ``x``: nothing lands in ``param.grad``.
- Predictions, pictures and CAMs cover the first ``MAX_IMAGES`` images of the batch.
- What could not be captured (``CaptureWarning``) becomes a remark on the page, not a warning.
- The model runs in eval mode (``hookscope.core.modes``), the way it predicts; a model left in
  training mode gets a remark saying so, and each module's flag back afterwards (BatchNorm's
  running statistics unchanged).

Jinja2, Pillow and matplotlib are imported when a report is built or rendered
(``pip install 'hookscope[viz]' jinja2``).
"""

from __future__ import annotations

import contextlib
import datetime
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from .._version import __version__
from ..core.capture import Capture, capture
from ..core.kinds import Kind, choose, is_gradient, misspelled, names, per_call
from ..core.modes import evaluating, mode_note
from ..core.select import Selector
from ..errors import CaptureWarning, OptionError
from ..explain.cam import CAM_METHODS
from ..explain.targets import Target, explained, logits, scores
from ..graph.nodes import Graph
from ..graph.trace import Tracer
from ..progress import Callback, Progress, callback
from .cards import layer_views, not_held, png
from .content import (
    LayerView,
    Report,
    coloured,
    human_time,
    predictions,
)
from .flow import FlowChart, flow_chart
from .pictures import cam_views, measured, pictures_of, with_badges
from .sections import as_section

if TYPE_CHECKING:
    from PIL.Image import Image

MAX_IMAGES = 8  # images of the batch that get a prediction, a picture and CAMs


def build_report(
    model: nn.Module,
    x: Tensor,
    *,
    select: Selector | None = None,
    grads: bool = False,
    kinds: Kind | Iterable[Kind] | None = None,
    pictures: Sequence[Image] | None = None,
    labels: Sequence[str] | None = None,
    target: Target = None,
    cam_methods: Sequence[str] = ("gradcam",),
    top_k: int = 5,
    title: str = "hookscope report",
    notes: Sequence[str] = (),
    max_layers: int = 64,
    progress: Progress = None,
    output: str | None = None,
    image_names: Sequence[str] = (),
    sections: Sequence[object] = (),
    graph: Graph | bool = True,
    faithfulness: bool = False,
) -> Report:
    """Run ``model(x)`` once under a capture of ``select`` and gather what the page shows.

    A gradient kind among ``kinds`` runs the backward pass itself, so ``grads=True`` is a shorthand for
    ``kinds=("output", "grad_output")`` (with the gradient-flow chart).

    Args:
        model: the network; it runs once in eval mode, its flags restored after.
        x: a ``(B, ...)`` input batch.
        select: the layers captured; None takes every leaf module.
        grads: also run the backward pass and draw ``grad_output`` and the gradient-flow chart.
        kinds: the kinds drawn on each card; None is ``output`` (and ``grad_output`` with ``grads``).
        pictures: one PIL image per image of ``x``, what the CAMs are drawn over; None draws ``x`` min-max scaled.
        labels: the class names, by index; None numbers them.
        target: what gradients and CAMs explain (``hookscope.explain.targets``), in the model's output at
            ``output``; None is the top-1 class.
        cam_methods: the CAM methods drawn (``hookscope.cam``'s); empty for none.
        top_k: predictions listed per image.
        title: the page's title.
        notes: lines shown under the title.
        max_layers: the most layer cards drawn; the rest are counted.
        progress: None or False (quiet, the default), True (lines on stderr), a stream, or a callable
            ``(stage, done, total)`` (``hookscope.progress``), told at the start of each stage (``forward``,
            ``layers``, ``cam``, ``flow``) with ``done=0``, and after each of its steps.
        output: the key of the tensor in a tuple or dict model output; None takes its first tensor (named
            in a remark).
        image_names: one name per image of ``x``, what the page calls it; empty names them ``image 0``, ...
        sections: drawn after the prediction, each a ``PatchSweep``, a ``Similarity`` or ``Divergence``
            (``hookscope.compare``), ``Probes``, ``TopExamples`` or a ``Section`` (``hookscope.report.sections``).
        graph: the module graph drawn: a ``Graph`` (``module_graph``, as ``save``, ``extract`` and
            ``build_training_report`` take it); True (the default) traces it by hooks in the same pass (which
            then records gradients, to measure what each module leaves saved for the backward), coloured by
            mean ``|gradient|`` with ``grads``, else by those saved bytes; False draws none.
        faithfulness: measure each CAM's deletion and insertion (``hookscope.faithfulness``, beside a random
            and an edge map): an AUC badge under each CAM and a section with the curves.

    Returns:
        The ``Report``; ``render_html`` or ``write_report`` draws it, ``show`` shows it inline.

    Raises:
        OptionError: ``x`` is not a batch tensor, an unknown kind or CAM method, ``cam_methods`` given
            as a string, or a bad ``top_k`` or ``max_layers``.
        SelectionError: ``select`` matches no module.
        TargetError: ``target`` does not fit the model's output.
    """
    drawn = _drawn_kinds(kinds, grads)
    grads = grads or any(is_gradient(k) for k in drawn)
    _check_options(model, x, grads, pictures, cam_methods, top_k, max_layers)
    step, shown = callback(progress), min(len(x), MAX_IMAGES)
    with evaluating(model) as switched:  # the model as it predicts; every module's flag restored after
        tracer = Tracer(model) if graph is True else None  # a Graph given is drawn as it is
        cap, returned, key, remarks = _run(model, x, select, drawn, grads, (target, output), step, tracer)
        scores_2d = _class_scores(returned, labels, key)
        del returned  # with a graph it holds the pass's autograd graph
        layers, left_out = _layers(cap, drawn, max_layers, step)
        seen = x[:shown]  # the images that get a prediction, a picture and CAMs
        images = pictures_of(seen, pictures[:shown] if pictures is not None else None)
        cam_layer, cams, heats, explained_target = cam_views(
            model, seen, images, cam_methods, (target, key), scores_2d, labels, step, remarks
        )
        faithful = [measured(model, seen, cam_methods, heats, explained_target, key)] if faithfulness and heats else []
        cams = with_badges(cams, faithful[0]) if faithful else cams
    flow = _flow(cap, step) if grads else None
    return Report(
        **_about(model, x, title),
        notes=tuple(notes),
        remarks=tuple(_general_remarks(switched, x, scores_2d, left_out) + remarks),
        pictures=tuple(png(image) for image in images),
        predictions=predictions(scores_2d[:shown], labels, top_k) if scores_2d is not None else (),
        cam_layer=cam_layer,
        cams=cams,
        flow=flow,
        kinds=drawn,
        layers=tuple(layers),
        selected=len(cap),
        image_names=tuple(image_names[:shown]) if len(image_names) == len(x) else (),
        sections=tuple(as_section(section) for section in (*faithful, *sections)),
        graph=coloured(tracer.graph() if tracer is not None else graph if isinstance(graph, Graph) else None, flow),
    )


def _layers(
    cap: Capture, drawn: tuple[Kind, ...], max_layers: int, step: Callback
) -> tuple[list[LayerView], list[str]]:
    """The ``layers`` stage: a card per captured layer, up to ``max_layers``, and the names of those left out.
    Each record knows its channels: (B, H, W, C) maps are drawn permuted."""
    return layer_views(
        cap, drawn, max_layers=max_layers, absent=not_held, progress=lambda done, total: step("layers", done, total)
    )


def _about(model: nn.Module, x: Tensor, title: str) -> dict[str, Any]:
    """The page's head: title, model, parameters, input, when and by which version."""
    return {
        "title": title, "model": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters()),
        "input": f"{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')} on {x.device}",
        "created": human_time(datetime.datetime.now().astimezone()), "version": __version__,
    }  # fmt: skip


# -- the captured pass ------------------------------------------------------------------------
def _run(
    model: nn.Module,
    x: Tensor,
    select: Selector | None,
    kinds: tuple[Kind, ...],
    grads: bool,
    explain: tuple[Target, str | None],
    step: Callback,
    tracer: Tracer | None = None,
) -> tuple[Capture, Any, str, list[str]]:
    """One forward pass under the capture (and a backward one with ``grads``), the ``forward`` stage:
    the capture, what the model returned, the key of the output explained (``explain``: the target
    and the key asked for), and the CaptureWarnings (and that choice) as text. A ``tracer`` watches
    the same pass (it records gradients: without ``grads`` the model then runs on a copy of ``x``)."""
    target, key = explain
    step("forward", 0, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CaptureWarning)
        if grads:
            with torch.inference_mode(False), torch.enable_grad():  # also under the caller's no_grad
                leaf = x.detach().clone().requires_grad_(x.is_floating_point())  # token ids: no d/dx
                with capture(model, select, kinds=kinds) as cap, tracer or contextlib.nullcontext():
                    output = model(leaf.clone())  # a copy: the model may change its input in place
                    asked = key  # a callable target gets the output at the key asked for, else all of it
                    key, note = explained(output, key)
                    picked, _ = scores(output, target, key if not callable(target) else asked, "build_report()")
                    # nothing lands in param.grad; token ids have no gradient, the parameters do
                    towards = [leaf] if leaf.requires_grad else [p for p in model.parameters() if p.requires_grad]
                    torch.autograd.grad(picked.sum(), towards, allow_unused=True)
        else:
            with capture(model, select, kinds=kinds) as cap, tracer or torch.no_grad():
                output = model(x if tracer is None else x.clone())  # the tracer records gradients: no inference tensor
            key, note = explained(output, key)
    step("forward", 1, 1)
    remarks = [] if note is None else [f"explained: {note}"]
    for warning in caught:
        if issubclass(warning.category, CaptureWarning):
            remarks.append(str(warning.message).removeprefix("hookscope: "))
        else:  # not ours to swallow
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return cap, output, key, remarks


def _flow(cap: Capture, step: Callback) -> FlowChart | None:
    step("flow", 0, 1)
    chart = flow_chart(cap)
    step("flow", 1, 1)
    return chart


def _class_scores(output: Any, labels: Sequence[str] | None, key: str) -> Tensor | None:
    """The model's (B, classes) output at ``key``, or None when it is something else."""
    out = logits(output, key).detach()
    if out.dim() != 2 or not out.is_floating_point():
        return None
    if labels is not None and len(labels) != out.shape[1]:
        raise OptionError(f"got {len(labels)} labels but the model returns {out.shape[1]} classes; pass one per class")
    return out


def _general_remarks(switched: list[str], x: Tensor, scores_2d: Tensor | None, left_out: list[str]) -> list[str]:
    """``switched``: the modules ``evaluating`` put in eval mode (``hookscope.core.modes``)."""
    remarks = []
    if switched:
        remarks.append(mode_note("the report", switched).removeprefix("hookscope: "))
    if scores_2d is None:
        remarks.append("the model's output is not (batch, classes): no predictions")
    if len(x) > MAX_IMAGES:
        remarks.append(f"the batch has {len(x)} images; predictions and CAMs show the first {MAX_IMAGES}")
    if left_out:
        named = ", ".join(left_out[:5]) + (", ..." if len(left_out) > 5 else "")
        more = f"{len(left_out)} more layers were captured but left out (raise max_layers=, --max-layers)"
        remarks.append(f"{more}: {named}")
    return remarks


# -- checks and small helpers -------------------------------------------------------------------
def _check_options(
    model: nn.Module,
    x: Tensor,
    grads: bool,
    pictures: Sequence[Image] | None,
    methods: Sequence[str],
    top_k: int,
    max_layers: int,
) -> None:
    if not isinstance(x, Tensor) or x.dim() == 0:
        raise OptionError(f"x must be a batch tensor (B, ...), got {type(x).__name__} {getattr(x, 'shape', '')}")
    if grads and not x.is_floating_point() and not any(p.requires_grad for p in model.parameters()):
        raise OptionError(
            f"gradients (grads=True or a gradient kind) of an integer input ({x.dtype}, token ids) flow from the "
            "model's parameters, and none requires grad; pass a float input or kinds without gradients"
        )
    if isinstance(methods, str):
        raise OptionError(f"cam_methods must be a list of method names, got the string {methods!r}; pass [{methods!r}]")
    unknown = [m for m in methods if m not in CAM_METHODS]
    if unknown:
        raise OptionError(
            f"unknown CAM method(s) {', '.join(map(repr, unknown))}; methods are {', '.join(CAM_METHODS)}"
        )
    if pictures is not None and len(pictures) != len(x):
        raise OptionError(f"got {len(pictures)} pictures for a batch of {len(x)}; pass one per image, or None")
    for name, value in (("top_k", top_k), ("max_layers", max_layers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OptionError(f"{name} must be a positive int, got {value!r}")


def _drawn_kinds(kinds: Kind | Iterable[Kind] | None, grads: bool) -> tuple[Kind, ...]:
    """The kinds each card draws, in table order: those asked for, or output (and grad_output with grads).
    A gradient kind among them means a backward pass (``build_report`` infers it)."""
    if kinds is None:
        return ("output", "grad_output") if grads else ("output",)
    drawable = tuple(k for k in names() if per_call(k))
    chosen, wrong = choose(kinds, drawable)
    if wrong or not chosen:
        got = ", ".join(map(repr, wrong)) or "none"
        got += misspelled(wrong)
        raise OptionError(f"a report draws the kinds {', '.join(drawable)}, got {got}; pass some of them as kinds=")
    return chosen
