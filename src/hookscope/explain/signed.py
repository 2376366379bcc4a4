"""Signed layers: Grad-CAM++ and XGrad-CAM divide by sum_ab A_ab, which they assume positive.

On a layer with signed outputs (a conv before its activation, such as MobileNetV2's last
``features.18.0``) that sum can be near 0 or negative, and the methods' eps decides the map.
``cam()`` warns (``CaptureWarning``, once per call) when more than ``SIGNED_SHARE`` of the
layer's activations are below ``-SIGN_TOLERANCE`` times their largest magnitude, and names the
module that follows with a non-negative output of the same shape (the activation to explain
instead), when one runs.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from ..core.capture import capture
from ..errors import CaptureWarning

SIGNED_SHARE = 0.05  # warn when more than this share of a layer's activations is negative...
SIGN_TOLERANCE = 1e-6  # ... by more than this share of the largest magnitude (rounding is not a sign)


def negative_share(activations: Tensor) -> float:
    """The share of activations below -``SIGN_TOLERANCE`` times the largest magnitude."""
    floor = -SIGN_TOLERANCE * activations.abs().amax()
    return float((activations < floor).double().mean())


def warn_if_signed(model: nn.Module, x: Tensor, method: str, activations: Tensor, layer: str, call: int) -> None:
    """Warn when ``activations`` (the layer's, as maps) are signed; see the module doc."""
    share = negative_share(activations)
    if share <= SIGNED_SHARE:
        return
    after = activation_after(model, x, layer, call)
    instead = f"the activation after it, select={after!r}" if after else "the activation that follows it"
    warnings.warn(
        f"{method} assumes non-negative activations, but {share:.0%} of those of layer {layer!r} are negative "
        f"(more than {SIGNED_SHARE:.0%}), so its eps decides the map; explain {instead}, or use gradcam",
        CaptureWarning,
        stacklevel=2,
    )


def activation_after(model: nn.Module, x: Tensor, layer: str, call: int = -1) -> str | None:
    """The first leaf module to return, after ``layer``'s call, a non-negative tensor of its shape.

    One forward pass under no_grad, keeping only each output's minimum and shape."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", CaptureWarning)
        with capture(model, lambda name, module: name == layer or _is_leaf(module), reduce=_lowest) as cap:
            model(x)
    calls = sorted((c for r in cap.values() for c in r.calls if c.tensors.get("output")), key=lambda c: c.order)
    mine = [c for c in calls if c.site == layer]
    if not -len(mine) <= call < len(mine):
        return None
    kept = mine[call].get("output")
    shape, order = kept[1:].tolist(), mine[call].order
    for c in calls:
        summary = c.get("output")
        if c.order > order and c.site != layer and summary[1:].tolist() == shape and summary[0] >= 0:
            return c.site
    return None


def _lowest(site: str, kind: str, key: str, tensor: Tensor) -> Tensor | None:
    """What ``activation_after`` keeps of a floating output: ``[min, *shape]`` (float64)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return None
    return torch.tensor([float(tensor.detach().amin()), *tensor.shape], dtype=torch.float64)


def _is_leaf(module: nn.Module) -> bool:
    return next(module.children(), None) is None
