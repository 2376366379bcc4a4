"""Class activation maps: the registry of methods, and the driver ``cam()``.

::

    heat = hookscope.cam(model, x, method="gradcam", target=285)   # (B, H, W) in [0, 1]

The maths are pure functions in ``hookscope.explain.cam_maths`` (also importable from here), raw maps
(B, h, w) at the layer's resolution, ReLU applied; ``normalize_maps`` (``hookscope.explain.normalize``)
scales each to [0, 1], resizes it to the input and scales it again, as pytorch-grad-cam and TorchCAM
do (a flat map, a 1x1 layer's, stays 0, and cam() warns that it is all zeros, and why).
``GRAD_METHODS`` maps a gradient method's name to its function; ``CAM_METHODS`` adds the
forward-only ones (Score-CAM, Eigen-CAM), which have drivers of their own below. A new gradient
method is a function and a ``GRAD_METHODS`` entry; a new forward-only one also gets a branch in
``cam()``.

The driver reads the layer through the passes of ``hookscope.explain.cam_passes`` (gradients by
``torch.autograd.grad`` on a detached copy of the input: no ``param.grad`` touched, frozen models
and ``torch.no_grad()`` work). Every pass runs in eval mode (``hookscope.core.modes``): a model left
in training mode is explained as it predicts, with a ``CaptureWarning``, and its flags, BatchNorm's
running statistics included, are as they were afterwards.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..base.deprecation import renamed
from ..core.modes import evaluating
from ..core.select import Selector
from ..errors import CaptureWarning, OptionError
from ..progress import Callback, Progress, callback
from .cam_maths import eigen_cam, grad_cam, grad_cam_pp, layer_cam, score_cam, score_cam_masks, xgrad_cam
from .cam_passes import Where, activation_maps, gradient_maps
from .layers import one_module
from .normalize import flat_reason
from .normalize import normalize_maps as normalize_maps
from .notes import once_each
from .signed import warn_if_signed
from .targets import Target, scores

GradMethod = Callable[[Tensor, Tensor], Tensor]
GRAD_METHODS: dict[str, GradMethod] = {
    "gradcam": grad_cam,
    "gradcam++": grad_cam_pp,
    "xgradcam": xgrad_cam,
    "layercam": layer_cam,
}
CAM_METHODS = (*GRAD_METHODS, "scorecam", "eigencam")
SIGN_SENSITIVE = ("gradcam++", "xgradcam")  # their weights divide by sum_ab A_ab, assumed >= 0 (see .signed)


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
            where, activations, gradients = gradient_maps(model, x, target, where)
            if method in SIGN_SENSITIVE:
                warn_if_signed(model, x, method, activations, str(where.layer), where.call)
            raw = GRAD_METHODS[method](activations, gradients)
        elif method == "eigencam":
            passed, activations = activation_maps(model, x, where, target)
            where, raw = passed.where, eigen_cam(activations)
        else:
            where, raw = _score_cam(model, x, target, where, batch_size, callback(progress))
    if (note := flat_reason(raw.float(), gradients, str(where.layer))) is not None:
        warnings.warn(note, CaptureWarning, stacklevel=3)  # the user's line (cam, then @renamed)
    return normalize_maps(raw.float(), size=(x.shape[2], x.shape[3]))


def _score_cam(
    model: nn.Module,
    x: Tensor,
    target: Target,
    where: Where,
    batch_size: int,
    progress: Callback,
) -> tuple[Where, Tensor]:
    """The layer Score-CAM read (named, when cam() picked it) and its raw maps."""
    passed, activations = activation_maps(model, x, where, target)
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
