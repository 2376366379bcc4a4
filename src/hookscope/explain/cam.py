"""Class activation maps: the maths, the registry of methods, and the driver ``cam()``, in one place.

::

    heat = hookscope.cam(model, x, method="gradcam", target=285)   # (B, H, W) in [0, 1]

The maths are pure functions on a layer's activations and gradients, each (B, C, h, w) (use
``hookscope.core.channels.spatial_maps`` for token activations), returning raw maps (B, h, w) at the
layer's resolution, ReLU applied; ``normalize_maps`` (``hookscope.explain.normalize``) scales each
to [0, 1], resizes it to the input and scales it again, as pytorch-grad-cam and TorchCAM do (a
flat map, a 1x1 layer's, stays 0, and cam() warns that it is all zeros, and why).
``GRAD_METHODS`` maps a gradient method's name to its function; ``CAM_METHODS`` adds the
forward-only ones (Score-CAM, Eigen-CAM), which have drivers of their own below. A new gradient
method is a function and a ``GRAD_METHODS`` entry; a new forward-only one also gets a branch in
``cam()``.

The driver captures what the maths need through ``hookscope.capture``. Gradients are taken with
``torch.autograd.grad`` on a forward pass fed a detached copy of the input, so nothing accumulates
into the model's ``param.grad``, frozen models work, and so does a call under ``torch.no_grad()`` or
``torch.inference_mode()``. The backward pass stops at the layer's output; only when an in-place op
changed that output later in the forward pass does cam() run the model again and differentiate
down to the input. Every pass runs in eval mode (``hookscope.core.modes``): a model left in
training mode is explained as it predicts, with a ``CaptureWarning``, and its flags, BatchNorm's
running statistics included, are as they were afterwards.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..base.deprecation import renamed
from ..core.capture import capture
from ..core.modes import evaluating
from ..core.records import Call
from ..core.select import Selector
from ..errors import CaptureWarning, HookscopeError, OptionError, ShapeError
from ..progress import Callback, Progress, callback
from .keys import layer_key
from .layers import choose_among, one_module
from .normalize import flat_reason
from .normalize import normalize_maps as normalize_maps
from .notes import once_each
from .reach import as_maps, reaching
from .signed import warn_if_signed
from .targets import Target, scores

# -- the maths ------------------------------------------------------------------------------------
_EPS = 1e-7


def grad_cam(activations: Tensor, gradients: Tensor) -> Tensor:
    """Grad-CAM (Selvaraju et al. 2017): ReLU(sum_k w_k A_k), w_k the spatial mean of dY/dA_k."""
    weights = gradients.mean(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
    return (weights * activations).sum(dim=1).relu()  # (B, h, w)


def grad_cam_pp(activations: Tensor, gradients: Tensor) -> Tensor:
    """Grad-CAM++ (Chattopadhay et al. 2018), with the exponential-score closed form for alpha."""
    g2, g3 = gradients.pow(2), gradients.pow(3)
    total = activations.sum(dim=(2, 3), keepdim=True)  # (B, C, 1, 1): sum_ab A_ab
    alpha = g2 / (2 * g2 + total * g3 + _EPS)  # (B, C, h, w)
    alpha = torch.where(gradients != 0, alpha, torch.zeros_like(alpha))
    weights = (alpha * gradients.relu()).sum(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
    return (weights * activations).sum(dim=1).relu()


def xgrad_cam(activations: Tensor, gradients: Tensor) -> Tensor:
    """XGrad-CAM (Fu et al. 2020): w_k = sum_ij (A_ij / sum_ab A_ab) dY/dA_ij."""
    total = activations.sum(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
    weights = (gradients * activations / (total + _EPS)).sum(dim=(2, 3), keepdim=True)
    return (weights * activations).sum(dim=1).relu()


def layer_cam(activations: Tensor, gradients: Tensor) -> Tensor:
    """LayerCAM (Jiang et al. 2021): ReLU(sum_k ReLU(dY/dA_k) * A_k), weights per position."""
    return (gradients.relu() * activations).sum(dim=1).relu()


def eigen_cam(activations: Tensor) -> Tensor:
    """Eigen-CAM (Muhammad & Yeasin 2020): activations projected on their first principal component.

    Not class-discriminative (no gradient). The sign of a principal component is arbitrary; we
    orient it to agree with the mean activation map, so strong activations stay bright.
    """
    batch, channels, h, w = activations.shape
    flat = activations.reshape(batch, channels, h * w).transpose(1, 2)  # (B, hw, C)
    centred = flat - flat.mean(dim=1, keepdim=True)
    vh: Tensor = torch.linalg.svd(centred.double(), full_matrices=False).Vh  # (B, C, C)
    projection = (centred.double() @ vh[:, 0, :, None]).squeeze(2)  # (B, hw)
    mean_map = flat.double().mean(dim=2)  # (B, hw)
    sign = torch.sign((projection * (mean_map - mean_map.mean(1, keepdim=True))).sum(1, keepdim=True))
    sign = torch.where(sign == 0, torch.ones_like(sign), sign)
    return (projection * sign).reshape(batch, h, w).to(activations.dtype).relu()


def score_cam_masks(activations: Tensor, size: tuple[int, int]) -> Tensor:
    """Score-CAM masks: each channel upsampled to ``size`` and scaled to [0, 1]. (B, C, H, W)."""
    masks = F.interpolate(activations, size=size, mode="bilinear", align_corners=False)
    low = masks.amin(dim=(2, 3), keepdim=True)
    high = masks.amax(dim=(2, 3), keepdim=True)
    return (masks - low) / (high - low).clamp_min(_EPS)


def score_cam(activations: Tensor, channel_scores: Tensor) -> Tensor:
    """Score-CAM (Wang et al. 2020): ReLU(sum_k softmax_k(score of x * mask_k) A_k).

    ``channel_scores`` (B, C) is the target score of the input masked by each channel's mask.
    """
    weights = channel_scores.softmax(dim=1)[:, :, None, None]  # (B, C, 1, 1)
    return (weights * activations).sum(dim=1).relu()


# -- the registry and the driver ------------------------------------------------------------------

GradMethod = Callable[[Tensor, Tensor], Tensor]
GRAD_METHODS: dict[str, GradMethod] = {
    "gradcam": grad_cam,
    "gradcam++": grad_cam_pp,
    "xgradcam": xgrad_cam,
    "layercam": layer_cam,
}
CAM_METHODS = (*GRAD_METHODS, "scorecam", "eigencam")
SIGN_SENSITIVE = ("gradcam++", "xgradcam")  # their weights divide by sum_ab A_ab, assumed >= 0 (see .signed)


class Where(NamedTuple):
    """Which tensors cam() reads: the layer's call and output key (layer None: cam() picks it from its
    own forward pass), and the model's output key."""

    layer: str | None
    call: int
    key: str | None
    output: str | None


class Pass(NamedTuple):
    """One forward pass: the model's output, the layer's calls, whether an in-place op changed the
    layer's output after the hook saw it, and the resolved Where."""

    out: Any
    calls: list[Call]
    changed: bool
    where: Where

    @property
    def chosen(self) -> Call | None:
        """The chosen call, None when it never ran."""
        return self.calls[self.where.call] if -len(self.calls) <= self.where.call < len(self.calls) else None


@renamed(layer="select")
def cam(
    model: nn.Module,
    x: Tensor,
    method: str = "gradcam",
    target: Target = None,
    *,
    select: Selector | None = None,
    call: int | None = None,
    key: str | None = None,
    output: str | None = None,
    batch_size: int = 32,
    progress: Progress = None,
) -> Tensor:
    """Heatmaps (B, H, W) at ``x``'s size, each scaled to [0, 1], for ``target`` (top-1 when None).

    ``select`` is a selector (``hookscope.core.select``) that must match exactly one module; None
    (the default) uses the last layer whose output is still a spatial map, or on a vision
    transformer the tokens its last attention reads, and the target depends on (a map before it
    when the gradient there is 0; never an output without one row per image) (``hookscope.explain.
    layers``; the choice is logged on the "hookscope" logger), found in the same forward pass that
    computes the map.
    ``call`` picks the layer's call when it runs several times, 0-based, negative from the end
    (None, the default: the last). ``key`` picks the tensor of a layer that returns several
    (default: the first, with a ``CaptureWarning``); ``output`` the tensor of the model's output
    that the target indexes (see ``hookscope.explain.targets``). ``batch_size`` bounds the masked
    copies Score-CAM runs at once; ``progress`` (``hookscope.progress``; default quiet) hears
    ``("scorecam", done, total)`` after each of those forward passes (one per channel and image, in
    batches). Grad-CAM++ and XGrad-CAM warn when more than 5% of the layer's activations are
    negative (a conv before its activation): their weights assume non-negative ones
    (``hookscope.explain.signed``). ``layer=`` is the old spelling of ``select=``.

    Args:
        model: the network; it runs in eval mode, its flags are restored afterwards.
        x: an image batch ``(B, C, H, W)``.
        method: ``gradcam`` (the default), ``gradcam++``, ``xgradcam``, ``scorecam`` or ``eigencam``.
        target: the class index (or one per image, a ``(B,)`` tensor, or a callable on the output
            returning ``(B,)`` scores); None is each image's top-1 class.
        select: the one module whose maps are read; None picks it (see above).
        call: which call of that module, 0-based, negative from the end; None is the last.
        key: the tensor of a module that returns several; None is the first.
        output: the key of the tensor in a structured model output that ``target`` indexes.
        batch_size: Score-CAM's masked copies per forward pass.
        progress: None or False (quiet), True (lines on stderr), a stream, or a callable
            ``(stage, done, total)`` (``hookscope.progress``).

    Returns:
        ``(B, H, W)`` heatmaps at ``x``'s size, each scaled to [0, 1].

    Raises:
        OptionError: an unknown method, or ``x`` is not 4-D.
        SelectionError: ``select`` matches no module or several, or no module returns spatial maps.
        ShapeError: the layer's output does not have one row per image (an LSTM over rows folds them
            into its batch axis).
        TargetError: ``target`` does not fit the model's output.
    """
    if method not in CAM_METHODS:
        raise OptionError(f"unknown CAM method {method!r}; methods are {', '.join(CAM_METHODS)}")
    if x.dim() != 4:
        raise OptionError(f"cam() needs an image batch (B, C, H, W), got shape {tuple(x.shape)}")
    with once_each(wrappers=1), evaluating(model, "cam()"):  # passes may repeat a note; 1: @renamed
        where, gradients = Where(one_module(model, select), -1 if call is None else call, key, output), None
        if method in GRAD_METHODS:
            where, activations, gradients = _gradient_cam(model, x, target, where)
            if method in SIGN_SENSITIVE:
                warn_if_signed(model, x, method, activations, str(where.layer), where.call)
            raw = GRAD_METHODS[method](activations, gradients)
        elif method == "eigencam":
            passed, activations = _activations(model, x, where, target)
            where, raw = passed.where, eigen_cam(activations)
        else:
            where, raw = _score_cam(model, x, target, where, batch_size, callback(progress))
    if (note := flat_reason(raw.float(), gradients, str(where.layer))) is not None:
        warnings.warn(note, CaptureWarning, stacklevel=3)  # the user's line (cam, then @renamed)
    return normalize_maps(raw.float(), size=(x.shape[2], x.shape[3]))


def _every(name: str, module: nn.Module) -> bool:
    return True


def _forward(model: nn.Module, x: Tensor, where: Where, target: Target, *, grad: bool) -> Pass:
    """One forward pass of a copy of ``x`` (the model may change its input in place). The layer's
    outputs are kept by reference, or, when no layer was named, every module's, and the layer is
    chosen from this pass (``choose_among``, its gradient probe on ``target``'s scores: the pass
    runs with gradients then, also for a forward-only method): no probe pass. A named layer without
    ``grad`` is copied, as any capture, so an in-place op after it cannot change what is kept."""
    grad = grad or where.layer is None
    with warnings.catch_warnings(), torch.inference_mode(False), torch.set_grad_enabled(grad):
        warnings.simplefilter("ignore", CaptureWarning)  # what could go wrong is checked below, and by a second pass
        leaf = x.detach().clone().requires_grad_(grad)  # a normal tensor, also from an inference one
        with capture(model, where.layer or _every, detach=not grad, clone=not grad) as live:
            out = model(leaf.clone())
        if where.layer is None:
            score = _probe_score(out, target, where.output)
            choice = choose_among(model, live, batch=len(x), reached=reaching(model, score))
            where = where._replace(layer=choice.layer, call=choice.call)
    changed = any(label.startswith(f"{where.layer!r} ") for label in live.changed_in_place())
    return Pass(out, live[str(where.layer)].calls, changed, where)


def _probe_score(out: Any, target: Target, output: str | None) -> Tensor | None:
    """The target's scores for the gradient probe; None when they cannot be read (the caller says why later)."""
    try:
        return scores(out, target, output)[0]
    except HookscopeError:
        return None


def _gradient_cam(model: nn.Module, x: Tensor, target: Target, where: Where) -> tuple[Where, Tensor, Tensor]:
    """The layer's activations and the gradient of the target score with respect to them, as maps."""
    with torch.inference_mode(False), torch.enable_grad():  # also under the caller's no_grad
        where, found = _at_the_layer(model, x, target, where)
        activations, gradients = found or _through_the_input(model, x, target, where)
    return where, _maps(model, where, activations, len(x)), _maps(model, where, gradients, len(x))


def _at_the_layer(
    model: nn.Module, x: Tensor, target: Target, where: Where
) -> tuple[Where, tuple[Tensor, Tensor] | None]:
    """One forward pass, the layer's outputs kept by reference (no copy), and a backward pass that
    stops at the chosen call's outputs (on a CNN, half the work); the tensor read is the one
    ``layer_key`` picks among those the gradient reaches. None when an in-place op changed an output
    of the layer after the hook saw it (the values and the gradient would be those of the changed
    tensor), or no output requires grad: then ``_through_the_input`` runs the forward pass again."""
    passed = _forward(model, x, where, target, grad=True)
    where = passed.where
    picked, _ = scores(passed.out, target, where.output)
    if passed.chosen is None or passed.changed:
        return where, None
    held = {k: passed.chosen.get("output", k) for k in passed.chosen.keys("output")}
    outputs = {k: t for k, t in held.items() if t.requires_grad}
    if not outputs:
        return where, None
    found = torch.autograd.grad(picked.sum(), list(outputs.values()), allow_unused=True)
    reached = {k: g for k, g in zip(outputs, found, strict=True) if g is not None}
    key = layer_key(passed.chosen, str(where.layer), where.key, reached)
    return where, None if key is None else (held[key].detach(), reached[key])


def _through_the_input(model: nn.Module, x: Tensor, target: Target, where: Where) -> tuple[Tensor, Tensor]:
    """Copies of the layer's outputs, and their gradients taken by hooks on a backward pass that runs
    down to a copy of the input."""
    leaf = x.detach().clone().requires_grad_(True)
    with capture(model, where.layer, kinds=("output", "grad_output")) as cap:
        picked, _ = scores(model(leaf.clone()), target, where.output)
        torch.autograd.grad(picked.sum(), leaf)
    chosen = _one_call(cap[str(where.layer)].calls, where)
    key = layer_key(chosen, str(where.layer), where.key, chosen.keys("grad_output"))
    return chosen.get("output", key), chosen.get("grad_output", key)


def _activations(model: nn.Module, x: Tensor, where: Where, target: Target) -> tuple[Pass, Tensor]:
    """One forward pass without gradients and the layer's activations as maps (a second pass, copying
    the layer's outputs, only when the first kept references that an in-place op changed)."""
    with torch.no_grad():
        passed = _forward(model, x, where, target, grad=False)
        if passed.changed:
            passed = _forward(model, x, passed.where, target, grad=False)  # the layer is named now: copies
    chosen = _one_call(passed.calls, passed.where)
    key = layer_key(chosen, str(passed.where.layer), passed.where.key)
    return passed, _maps(model, passed.where, chosen.get("output", key).detach(), len(x))


def _maps(model: nn.Module, where: Where, tensor: Tensor, batch: int) -> Tensor:
    """``tensor`` as ``(B, C, H, W)`` maps (``reach.as_maps``), refused when its first axis is not the batch."""
    maps = as_maps(model, str(where.layer), tensor)
    if len(maps) != batch:
        raise ShapeError(
            f"cam() reads layer {where.layer!r}, whose output {tuple(tensor.shape)} has {len(maps)} rows for a batch "
            f"of {batch} (it folds another axis into the batch, as an LSTM over rows does); pass select= another layer"
        )
    return maps


def _score_cam(
    model: nn.Module,
    x: Tensor,
    target: Target,
    where: Where,
    batch_size: int,
    progress: Callback,
) -> tuple[Where, Tensor]:
    """The layer Score-CAM read (named, when cam() picked it) and its raw maps."""
    passed, activations = _activations(model, x, where, target)
    with torch.no_grad():
        _, classes = scores(passed.out, target, passed.where.output)
    masks = score_cam_masks(activations, size=(x.shape[2], x.shape[3]))  # (B, C, H, W)
    per_image = [int(c) for c in classes] if classes is not None else [target] * len(x)
    chunks = -(-masks.shape[1] // batch_size)  # forward passes per image
    progress("scorecam", 0, len(x) * chunks)
    channel_scores = []
    for i in range(len(x)):
        step = lambda done, i=i: progress("scorecam", i * chunks + done, len(x) * chunks)  # noqa: E731
        channel_scores.append(_masked_scores(model, x[i], masks[i], per_image[i], where.output, batch_size, step))
    return passed.where, score_cam(activations, torch.stack(channel_scores))


def _masked_scores(
    model: nn.Module,
    image: Tensor,
    masks: Tensor,
    target: Target,
    output: str | None,
    batch_size: int,
    step: Callable[[int], None],
) -> Tensor:
    """Target score of ``image * mask`` for every mask of one image, ``batch_size`` at a time. (C,);
    ``step(n)`` after the n-th forward pass."""
    out = []
    with torch.no_grad():
        for n, chunk in enumerate(torch.split(masks, batch_size), start=1):
            picked, _ = scores(model(image[None] * chunk[:, None]), target, output)  # chunk: (n, H, W)
            out.append(picked)
            step(n)
    return torch.cat(out)


def _one_call(calls: list[Call], where: Where) -> Call:
    try:
        return calls[where.call]
    except IndexError:
        raise OptionError(
            f"layer {where.layer!r} ran {len(calls)} time(s) in this forward; call={where.call} does not exist"
        ) from None
