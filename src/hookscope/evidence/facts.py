"""The numbers of a wrong-prediction bundle, each computed through the room that owns it.

``prediction_facts``: logits, probabilities and the top-k (one forward pass, eval mode, no gradient).
``contrastive(predicted, expected)``: the target ``score[predicted] - score[expected]`` as a callable, the one
``hookscope.explain.targets`` takes. ``gradient_ranking``: every module by the L2 norm of the contrastive
score's gradient at its output, from one capture (``hookscope.capture``), which also holds what the store
keeps. ``ablation``: the top ``fraction`` of the contrastive map's positions at the layer zeroed through
``hookscope.edit`` (``edits.function``), with the edit's tally and the score before and after.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.call import Call
from ..core.capture import Capture, capture
from ..core.modes import evaluating
from ..edits import ops
from ..edits.edit import edit
from ..errors import CaptureWarning, EditError

ABLATED = 0.1  # the share of the map's positions at the layer that the verified ablation zeroes


def number(value: float | Tensor) -> float | str:
    """A float for JSON: NaN and infinities as the strings ``nan``, ``inf``, ``-inf`` (JSON has none)."""
    value = float(value)  # a 0-d tensor too
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def contrastive(predicted: int, expected: int) -> Callable[[Tensor], Tensor]:
    """The target ``logits[:, predicted] - logits[:, expected]``: why the model chose one over the other."""

    def score(logits: Tensor) -> Tensor:
        return logits[:, predicted] - logits[:, expected]

    return score


def prediction_facts(model: nn.Module, x: Tensor, top_k: int) -> tuple[Tensor, Tensor, list[dict[str, Any]]]:
    """``(logits (K,), probabilities (K,), top_k rows)`` of the one image ``x`` (1, C, H, W)."""
    with evaluating(model), torch.no_grad():
        logits = model(x).detach().float()[0].cpu()
    probabilities = logits.softmax(0)
    order = torch.argsort(logits, descending=True, stable=True)[: max(1, min(top_k, logits.numel()))]
    rows = [{"class": int(c), "logit": number(logits[c]), "probability": number(probabilities[c])} for c in order]
    return logits, probabilities, rows


def _every_module(name: str, module: nn.Module) -> bool:
    return bool(name)  # the model itself ("") is the whole pass: no layer to rank


def gradient_ranking(
    model: nn.Module, x: Tensor, score: Callable[[Tensor], Tensor]
) -> tuple[Capture, list[dict[str, Any]], list[str], list[str]]:
    """One pass of ``score``'s gradient through every module: the capture (outputs and their gradients), the
    modules ranked by ``|d score / d output|`` (largest first; ties by name), those that never ran, and the
    capture's notes (what it could not keep)."""
    with warnings.catch_warnings(record=True) as caught, evaluating(model):
        warnings.simplefilter("always", CaptureWarning)
        with torch.enable_grad(), capture(model, _every_module, kinds=("output", "grad_output")) as cap:
            torch.autograd.backward(score(model(x.detach().clone())).sum())
    ranked, never = [], []
    for name, record in cap.items():
        if not record.calls:
            never.append(name)
            continue
        grads = [g for call in record.calls for g in _gradients(call)]
        if grads:
            norm = math.sqrt(sum(float(g.double().square().sum()) for g in grads))
            ranked.append({"layer": name, "grad_norm": number(norm)})
    ranked.sort(key=lambda row: (-_sortable(row["grad_norm"]), row["layer"]))
    notes = [str(w.message) for w in caught if issubclass(w.category, CaptureWarning)]
    return cap, ranked, never, notes


def _gradients(call: Call) -> list[Tensor]:
    return list(call.tensors.get("grad_output", {}).values())


def _sortable(value: float | str) -> float:
    return value if isinstance(value, float) else (math.inf if value in ("inf", "nan") else -math.inf)


def top_region(heat: Tensor, size: Sequence[int], fraction: float = ABLATED) -> Tensor:
    """A ``(1, 1, h, w)`` float mask: 0 on the ``ceil(fraction * h * w)`` positions where ``heat`` (1, H, W),
    averaged down to the layer's ``size`` (h, w), is highest (ties by position), 1 elsewhere."""
    h, w = int(size[0]), int(size[1])
    small = F.adaptive_avg_pool2d(heat[None].float(), (h, w)).flatten()  # (h * w,)
    count = max(1, math.ceil(fraction * h * w))
    top = torch.argsort(small, descending=True, stable=True)[:count]
    keep = torch.ones(h * w)
    keep[top] = 0.0
    return keep.reshape(1, 1, h, w)


def ablation(
    model: nn.Module, x: Tensor, layer: str, call: int, keep: Tensor, score: Callable[[Tensor], Tensor]
) -> dict[str, Any]:
    """Zero the map's top region at ``layer`` (``keep``: 0 where zeroed) through ``hookscope.edit`` and measure
    ``score`` before and after: the manifest's ``ablation`` (``refused`` with why when the edit did not take)."""

    def zeroed(tensor: Tensor, index: int) -> Tensor:
        return tensor * keep.to(tensor.device, tensor.dtype)

    with evaluating(model), torch.no_grad():
        before = model(x)
        try:
            with edit(model, {layer: ops.function(zeroed, call=call)}) as done:
                after = model(x)
        except EditError as err:
            return {"status": "refused", "why": str(err)}
    [row] = list(done.report())
    old, new = float(score(before.float())[0]), float(score(after.float())[0])
    return {
        "status": "verified", "layer": layer, "fraction": ABLATED, "positions": int((keep == 0).sum()),
        "tally": {"calls": len(row.calls), "changed": row.changed, "numel": row.elements},
        "before": number(old), "after": number(new), "change": number(new - old),
        "confirms": new < old,
        "predicted_after": int(after[0].argmax()),
    }  # fmt: skip
