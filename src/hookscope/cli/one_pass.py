"""``hookscope capture``'s one pass: ``model(*args, **kwargs)`` under a capture, and for gradient kinds a
backward pass of the target score.

The inputs are what ``hookscope.cli.inputs`` read (one tensor, or a ``.pt``'s tuple or dict) or a
text model's tokenized sentences. Gradients are taken towards the float inputs, or for token ids
(which have none) towards the parameters: the layers' gradients need no d/dx. Nothing lands in
``param.grad`` (``torch.autograd.grad``, not ``backward``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..core import kinds
from ..core.capture import Capture, capture
from ..core.kinds import Kind
from ..explain.targets import Target, scores
from ..graph.trace import Tracer


def capture_once(
    model: torch.nn.Module,
    inputs: tuple[tuple[Any, ...], dict[str, Any]],
    select: Any,
    wanted: tuple[Kind, ...],
    target: Target,
    output: str | None = None,
    tracer: Tracer | None = None,
) -> Capture:
    """One forward pass of ``model(*args, **kwargs)`` under a capture, and for gradient kinds a backward pass
    of the target score, towards the float inputs, or the parameters for token ids (nothing lands in .grad).
    A ``tracer`` (``hookscope.graph.trace``) watches the same pass for the module graph."""
    args, kwargs = inputs
    if not any(kinds.is_gradient(kind) for kind in wanted):
        with capture(model, select, kinds=wanted) as cap, tracer or torch.no_grad():
            model(*args, **kwargs)
        return cap
    args = tuple(as_leaf(a) for a in args)
    kwargs = {k: as_leaf(v) for k, v in kwargs.items()}
    towards = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor) and t.requires_grad]
    towards = towards or [p for p in model.parameters() if p.requires_grad]
    with capture(model, select, kinds=wanted) as cap, tracer or contextlib.nullcontext():
        picked, _ = scores(model(*args, **kwargs), target, output)
        torch.autograd.grad(picked.sum(), towards, allow_unused=True)
    return cap


def as_leaf(value: Any) -> Any:
    """A float tensor as a fresh leaf that requires grad; token ids (and anything else) as they are."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().clone().requires_grad_(True)
    return value
