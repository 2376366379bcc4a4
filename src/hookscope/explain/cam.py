"""The CAM driver: capture what a CAM method needs through ``hookscope.capture``, then do the maths.

::

    heat = hookscope.cam(model, x, method="gradcam", target=285)   # (B, H, W) in [0, 1]

Gradients are taken with ``torch.autograd.grad`` on a forward pass fed a detached copy of the
input, so nothing accumulates into the model's ``param.grad``, frozen models work, and so does a
call under ``torch.no_grad()`` or ``torch.inference_mode()``. The backward pass stops at the
layer's output; only when an in-place op changed that output later in the forward pass does cam()
run the model again and differentiate down to the input. Use the model in eval mode: in train
mode, BatchNorm couples the images of a batch (and that second pass would update its statistics).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import torch
from torch import Tensor, nn

from .. import cams as maths
from ..core.capture import capture, probe
from ..core.records import Call
from ..errors import CaptureWarning, OptionError, SelectionError
from ..tokens import spatial_maps
from .targets import Target, scores

log = logging.getLogger("hookscope")

GradMethod = Callable[[Tensor, Tensor], Tensor]
GRAD_METHODS: dict[str, GradMethod] = {
    "gradcam": maths.grad_cam,
    "gradcam++": maths.grad_cam_pp,
    "xgradcam": maths.xgrad_cam,
    "layercam": maths.layer_cam,
}
METHODS = (*GRAD_METHODS, "scorecam", "eigencam")


def cam(
    model: nn.Module,
    x: Tensor,
    method: str = "gradcam",
    target: Target = None,
    *,
    layer: str | None = None,
    call: int = -1,
    batch_size: int = 32,
) -> Tensor:
    """Heatmaps (B, H, W) at ``x``'s size, each scaled to [0, 1], for ``target`` (top-1 when None).

    ``layer`` is a module name; without one, the last layer whose output is still a spatial map
    is used (``pick_layer`` says which; it is logged on the "hookscope" logger). ``call`` picks the
    layer's call when it runs several times (the last by default). ``batch_size`` bounds the
    masked copies Score-CAM runs at once.
    """
    if method not in METHODS:
        raise OptionError(f"unknown CAM method {method!r}; methods are {', '.join(METHODS)}")
    if x.dim() != 4:
        raise OptionError(f"cam() needs an image batch (B, C, H, W), got shape {tuple(x.shape)}")
    if layer is None:
        layer, call = pick_layer(model, x)
    if method in GRAD_METHODS:
        raw = _gradient_cam(model, x, GRAD_METHODS[method], target, layer, call)
    elif method == "eigencam":
        raw = maths.eigen_cam(_activations(model, x, layer, call))
    else:
        raw = _score_cam(model, x, target, layer, call, batch_size)
    return maths.normalize_maps(raw.float(), size=(x.shape[2], x.shape[3]))


def pick_layer(model: nn.Module, x: Tensor) -> tuple[str, int]:
    """The (name, call) of the last module call whose output is a spatial map larger than 1x1."""
    cap = probe(model, x)
    spatial = [c for name, r in cap.items() if name for c in r.calls if _is_spatial(c)]
    if not spatial:
        raise SelectionError(
            f"no module of {type(model).__name__} returns a (B, C, H, W) map larger than 1x1; pass layer=NAME"
        )
    last = max(spatial, key=lambda c: c.order)
    log.info("hookscope.cam: using layer %r (call %d), output %s", last.site, last.index, tuple(last.output.shape))
    return last.site, last.index


def _is_spatial(call: Call) -> bool:
    held = call.tensors.get("output")
    if not held:
        return False
    first = next(iter(held.values()))
    return first.dim() == 4 and first.shape[2] * first.shape[3] > 1 and first.is_floating_point()


def _gradient_cam(model: nn.Module, x: Tensor, method: GradMethod, target: Target, layer: str, call: int) -> Tensor:
    with torch.inference_mode(False), torch.enable_grad():  # also under the caller's no_grad
        found = _at_the_layer(model, x, target, layer, call) or _through_the_input(model, x, target, layer, call)
    activations, gradients = found
    return method(spatial_maps(activations, tokens=True), spatial_maps(gradients, tokens=True))


def _at_the_layer(model: nn.Module, x: Tensor, target: Target, layer: str, call: int) -> tuple[Tensor, Tensor] | None:
    """One forward pass, the layer's outputs kept by reference (no copy), and a backward pass that
    stops at the chosen call's output (on a CNN, half the work). None when an in-place op changed an
    output of the layer after the hook saw it (the values and the gradient would be those of the
    changed tensor), or the output does not require grad or reach the score: then
    ``_through_the_input`` runs the forward pass again."""
    leaf = x.detach().clone().requires_grad_(True)
    with warnings.catch_warnings():  # what could go wrong is checked below, and by the second pass
        warnings.simplefilter("ignore", CaptureWarning)
        with capture(model, layer, detach=False, clone=False) as live:
            picked, _ = scores(model(leaf.clone()), target)  # a copy: the model may change it in place
    calls = live[layer].calls
    if not -len(calls) <= call < len(calls) or live.changed_in_place():
        return None
    outputs = list(calls[call].tensors.get("output", {}).values())
    if len(outputs) != 1 or not outputs[0].requires_grad:
        return None
    (gradient,) = torch.autograd.grad(picked.sum(), outputs[0], allow_unused=True)
    return None if gradient is None else (outputs[0].detach(), gradient)


def _through_the_input(model: nn.Module, x: Tensor, target: Target, layer: str, call: int) -> tuple[Tensor, Tensor]:
    """Copies of the layer's outputs, and their gradients taken by hooks on a backward pass that runs
    down to a copy of the input."""
    leaf = x.detach().clone().requires_grad_(True)
    with capture(model, layer, kinds=("output", "grad_output")) as cap:
        picked, _ = scores(model(leaf.clone()), target)
        torch.autograd.grad(picked.sum(), leaf)
    chosen = _one_call(cap[layer].calls, layer, call)
    return chosen.output, chosen.grad_output


def _activations(model: nn.Module, x: Tensor, layer: str, call: int) -> Tensor:
    with capture(model, layer) as cap, torch.no_grad():
        model(x)
    return spatial_maps(_one_call(cap[layer].calls, layer, call).output, tokens=True)


def _score_cam(model: nn.Module, x: Tensor, target: Target, layer: str, call: int, batch_size: int) -> Tensor:
    with capture(model, layer) as cap, torch.no_grad():
        _, classes = scores(model(x), target)
    activations = spatial_maps(_one_call(cap[layer].calls, layer, call).output, tokens=True)
    masks = maths.score_cam_masks(activations, size=(x.shape[2], x.shape[3]))  # (B, C, H, W)
    per_image = [int(c) for c in classes] if classes is not None else [target] * len(x)
    channel_scores = [_masked_scores(model, x[i], masks[i], per_image[i], batch_size) for i in range(len(x))]
    return maths.score_cam(activations, torch.stack(channel_scores))


def _masked_scores(model: nn.Module, image: Tensor, masks: Tensor, target: Target, batch_size: int) -> Tensor:
    """Target score of ``image * mask`` for every mask of one image, ``batch_size`` at a time. (C,)."""
    out = []
    with torch.no_grad():
        for chunk in torch.split(masks, batch_size):
            picked, _ = scores(model(image[None] * chunk[:, None]), target)  # chunk: (n, H, W)
            out.append(picked)
    return torch.cat(out)


def _one_call(calls: list[Call], layer: str, call: int) -> Call:
    try:
        return calls[call]
    except IndexError:
        raise OptionError(
            f"layer {layer!r} ran {len(calls)} time(s) in this forward; call={call} does not exist"
        ) from None
