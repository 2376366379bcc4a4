"""Input attributions: how much each input value counts for one score per image.

::

    attr = attribute(model, x, "integrated_gradients", target=281)   # x's shape, detached

Methods, each checked against Captum in the tests (its class in brackets):

    saliency              d score / d x, signed (``Saliency(abs=False)``; ``.abs()`` gives the classic map)
    input_x_gradient      x * d score / d x (``InputXGradient``)
    smoothgrad            mean d score / d x over ``samples`` noisy copies of x, noise std ``noise`` times
                          each image's max - min (Smilkov et al. 2017; ``NoiseTunnel(Saliency)``)
    integrated_gradients  (x - x') * integral over a in [0, 1] of d score / d x at x' + a (x - x'), by
                          ``steps``-point Gauss-Legendre (``IntegratedGradients``, its default method)
    guided_backprop       d score / d x with only positive gradients let back through every
                          ``nn.ReLU`` module (``GuidedBackprop``)

The target is what ``hookscope.explain.targets.scores`` takes (None = each image's top-1 class). For
smoothgrad and integrated gradients a class target is fixed on the clean x and kept for every
noisy copy and every step.

Gradients come from ``torch.autograd.grad`` with respect to a copy of x: x is not modified,
nothing accumulates in ``param.grad`` and no flag of the model (``training``, ``requires_grad``)
is left changed. ``attribute`` enables gradients (and leaves inference mode) itself, so it also works
when the caller runs under ``torch.no_grad()``. It runs the model in eval mode
(``hookscope.core.modes``): in training mode Dropout would be random and BatchNorm would mix the
images (and the steps) of one forward pass and update its running statistics. A model left in
training mode gets a ``CaptureWarning``, and each module's flag back afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from typing import Any, Literal, get_args, overload

import torch
from torch import Tensor, nn

from ..base.deprecation import warn_renamed
from ..core.compiled import is_compiled, run_eagerly
from ..core.hooks import HandleGroup
from ..core.modes import evaluating
from ..errors import OptionError
from ..progress import Progress, callback
from .baselines import Baseline, gauss_legendre, make_baseline, span
from .notes import once_each
from .targets import Target, logits, scores

Method = Literal["saliency", "input_x_gradient", "smoothgrad", "integrated_gradients", "guided_backprop"]
ATTRIBUTION_METHODS: tuple[str, ...] = get_args(Method)

Points = Callable[[Tensor, Tensor], Tensor]  # (steps, images) of some rows -> those rows' inputs
Forward = Callable[[Tensor], Any]  # the model, or the model and the pick of its output's tensor
Steps = Callable[[int, int], None]  # (done, total) of the method's stage: the progress callback


@overload
def attribute(
    model: nn.Module, x: Tensor, method: Method = ..., target: Target = ..., *,
    baseline: Baseline = ..., steps: int = ..., batch_size: int | None = ..., samples: int = ...,
    noise: float = ..., generator: torch.Generator | None = ..., output: str | None = ...,
    progress: Progress = ..., return_delta: Literal[False] = ...,
) -> Tensor: ...  # fmt: skip
@overload
def attribute(
    model: nn.Module, x: Tensor, method: Method = ..., target: Target = ..., *,
    baseline: Baseline = ..., steps: int = ..., batch_size: int | None = ..., samples: int = ...,
    noise: float = ..., generator: torch.Generator | None = ..., output: str | None = ...,
    progress: Progress = ..., return_delta: Literal[True],
) -> tuple[Tensor, Tensor]: ...  # fmt: skip
def attribute(
    model: nn.Module,
    x: Tensor,
    method: Method = "saliency",
    target: Target = None,
    *,
    baseline: Baseline = None,
    steps: int = 50,
    batch_size: int | None = None,
    samples: int = 25,
    noise: float = 0.15,
    generator: torch.Generator | None = None,
    output: str | None = None,
    progress: Progress = None,
    return_delta: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Attributions of ``model``'s ``target`` score to ``x``, with ``x``'s shape (see the module doc).

    ``baseline`` (integrated gradients): None or "zeros", "blur" (x blurred), "uniform" (fixed
    noise within each image's range), a number (a constant image, as Captum takes) or a tensor
    broadcastable to x. ``steps`` / ``samples``: the
    integration points / noisy copies per image, sent ``batch_size`` rows at a time (None: all
    at once). ``generator`` makes smoothgrad's noise reproducible. ``return_delta`` also returns
    integrated gradients' per-image ``sum(attr) - (score(x) - score(baseline))``. ``output``
    picks the tensor of a structured model output that the target indexes (see
    ``hookscope.explain.targets``). ``progress`` (``hookscope.progress``; default quiet) hears
    ``(method, done, total)`` after each batch of rows through the model. ``method="ig"`` is the old
    spelling of ``"integrated_gradients"``.

    Args:
        model: the network; it runs in eval mode, its flags are restored afterwards.
        x: a floating ``(B, ...)`` input batch; it is not modified.
        method: ``saliency`` (the default), ``input_x_gradient``, ``smoothgrad``,
            ``integrated_gradients`` or ``guided_backprop``.
        target: what is explained: a class index, one per image, a ``(B,)`` tensor, or a callable on
            the output returning ``(B,)`` scores; None is each image's top-1 class.
        baseline: integrated gradients' starting point (see above); None is zeros.
        steps: integrated gradients' Gauss-Legendre points per image.
        batch_size: rows of steps or noisy copies sent through the model at once; None sends all.
        samples: smoothgrad's noisy copies per image.
        noise: smoothgrad's noise std, as a fraction of each image's max - min.
        generator: the random generator of smoothgrad's noise; None uses torch's global one.
        output: the key of the tensor in a structured model output that ``target`` indexes; None
            takes the first tensor.
        progress: None or False (quiet), True (lines on stderr), a stream, or a callable
            ``(stage, done, total)`` (``hookscope.progress``).
        return_delta: with integrated gradients, also return the completeness error per image.

    Returns:
        The attributions, detached, with ``x``'s shape; with ``return_delta``, the pair
        ``(attributions, delta)`` with ``delta`` of shape ``(B,)``.

    Raises:
        OptionError: an unknown method, ``x`` not a floating batch, a non-positive ``steps``,
            ``samples`` or ``batch_size``, a negative ``noise``, or ``return_delta`` with a method
            other than integrated gradients.
        TargetError: ``target`` does not fit the model's output.
    """
    method = _method(method)
    _check_options(x, method, steps, samples, noise, batch_size)
    step = partial(callback(progress), method)
    if return_delta and method != "integrated_gradients":
        raise OptionError(f"return_delta=True needs method='integrated_gradients', got method={method!r}")
    forward: Forward = model if output is None else partial(_pick_output, model, output)
    with torch.inference_mode(False), torch.enable_grad(), once_each(), evaluating(model, "attribute()"):
        x = x.detach().clone()  # a normal tensor even if x was made in inference mode
        if method == "integrated_gradients":
            attr, delta = _integrated_gradients(forward, x, target, baseline, steps, batch_size, step)
            return (attr, delta) if return_delta else attr
        if method == "smoothgrad":
            return _smoothgrad(forward, x, target, samples, noise, batch_size, generator, step)
        step(0, 1)
        if method == "guided_backprop":
            grad = _guided_backprop(model, forward, x, target)
        else:
            grad = _gradient(forward, x, target)[0]
        step(1, 1)
        return x * grad if method == "input_x_gradient" else grad


def _method(method: str) -> Method:
    """The method's name, with the old spelling ``"ig"`` turned into ``"integrated_gradients"`` (and a warning)."""
    if method == "ig":
        warn_renamed('attribute(method="ig")', 'attribute(method="integrated_gradients")', stacklevel=3)
        return "integrated_gradients"
    return method  # type: ignore[return-value]  # checked by _check_options


def _pick_output(model: nn.Module, key: str, x: Tensor) -> Tensor:
    return logits(model(x), key)


def _name(forward: Forward) -> str:
    return type(forward.args[0] if isinstance(forward, partial) else forward).__name__


def _gradient(model: Forward, x: Tensor, target: Target) -> tuple[Tensor, Tensor]:
    """d score / d x row by row, and the scores: ``(N, ...)`` and ``(N,)``, both detached."""
    inputs = x.detach().requires_grad_(True)
    score, _ = scores(model(inputs.clone()), target)  # a non-leaf copy: the model may change it in place
    if not score.requires_grad:
        raise OptionError(
            f"the target score of {_name(model)} does not depend on x through autograd "
            "(the model detaches, or runs under torch.no_grad() inside forward); nothing to differentiate"
        )
    (grad,) = torch.autograd.grad(score.sum(), inputs, allow_unused=True, materialize_grads=True)
    return grad, score.detach()


def _smoothgrad(
    model: Forward, x: Tensor, target: Target, samples: int, noise: float, batch_size: int | None,
    generator: torch.Generator | None, step: Steps,
) -> Tensor:  # fmt: skip
    """Mean d score / d x over ``samples`` copies x + N(0, (noise * (max - min))^2) of each image.

    Noise is drawn one row at a time, sample-major (sample 0 of every image, then sample 1...),
    so a seeded ``generator`` gives the same noise for any ``batch_size``.
    """
    fixed = _fixed_target(model, x, target)[1]
    std = noise * span(x)  # (B, 1, ...)
    device = generator.device if generator is not None else x.device

    def noisy(_: Tensor, image: Tensor) -> Tensor:
        draws = [torch.randn(x.shape[1:], generator=generator, dtype=x.dtype, device=device) for _ in image]
        return x[image] + std[image] * torch.stack(draws).to(x.device)

    weights = torch.full((samples,), 1 / samples, dtype=x.dtype, device=x.device)
    return _weighted_gradients(model, noisy, weights, x, fixed, batch_size, step)


def _integrated_gradients(
    model: Forward, x: Tensor, target: Target, baseline: Baseline, steps: int, batch_size: int | None, step: Steps
) -> tuple[Tensor, Tensor]:
    """Integrated gradients from ``baseline`` to x by ``steps``-point Gauss-Legendre, and the delta.

    delta = sum(attr) - (score(x) - score(baseline)) per image: ``(B,)``; it goes to 0 as the
    quadrature converges (Sundararajan et al. 2017, completeness).
    """
    base = make_baseline(x, baseline)
    score_x, fixed = _fixed_target(model, x, target)
    alphas, weights = gauss_legendre(steps)
    alphas, weights = alphas.to(x), weights.to(x)
    diff = x - base

    def on_path(point: Tensor, image: Tensor) -> Tensor:
        return base[image] + _per_row(alphas[point], x) * diff[image]

    attr = diff * _weighted_gradients(model, on_path, weights, x, fixed, batch_size, step)
    score_base = _fixed_target(model, base, fixed)[0]
    return attr, attr.flatten(1).sum(1) - (score_x - score_base)


def _guided_backprop(model: nn.Module, forward: Forward, x: Tensor, target: Target) -> Tensor:
    """d score / d x with every ``nn.ReLU`` module letting only positive gradients back.

    A forward hook on each ReLU hooks its output tensor and clamps the incoming gradient to
    >= 0; autograd's ReLU backward then zeroes where the input was <= 0. That is Captum's
    relu(grad_input), and it works for ReLU(inplace=True) and for a ReLU module called several
    times. Functional relu calls (``torch.relu``, ``F.relu``) are not hooked.
    """
    relus = list({id(m): m for m in model.modules() if isinstance(m, nn.ReLU)}.values())
    if not relus:
        raise OptionError(_relu_message(model, "has no nn.ReLU module"))
    handles = HandleGroup()
    try:
        for relu in relus:
            handles.on_forward(relu, partial(_guide_output, handles))
        with run_eagerly() if is_compiled(model) else nullcontext():  # compiled code skips new hooks
            grad = _gradient(forward, x, target)[0]
        ran = len(handles) > len(relus)  # each ReLU call with grad added one tensor hook
    finally:
        handles.remove()
    if not ran:
        raise OptionError(_relu_message(model, f"never called its {len(relus)} nn.ReLU module(s) with grad"))
    return grad


def _guide_output(handles: HandleGroup, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
    if isinstance(output, Tensor) and output.requires_grad:  # output is None when forward raised
        handles.on_grad(output, _positive)


def _positive(grad: Tensor) -> Tensor:
    return grad.clamp(min=0)


def _relu_message(model: nn.Module, problem: str) -> str:
    return (
        f"guided_backprop: {type(model).__name__} {problem}; it rewrites the gradient of nn.ReLU modules "
        "only, so replace functional relu (torch.relu, F.relu) with nn.ReLU modules or pick another method"
    )


def _weighted_gradients(
    model: Forward, points: Points, weights: Tensor, x: Tensor, target: Target, batch_size: int | None, step: Steps
) -> Tensor:
    """sum_s weights[s] * d score / d input at ``points(s, i)``, for each image i of x: x's shape.

    Row r = s * B + i; rows go through the model ``batch_size`` at a time. A class target must
    already be ``(B,)`` indices; a callable target sees each chunk of rows. ``step(done, total)``
    after each chunk.
    """
    batch = len(x)
    rows = len(weights) * batch
    chunk = batch_size or rows
    total = torch.zeros_like(x)
    chunks = -(-rows // chunk)
    step(0, chunks)
    for start in range(0, rows, chunk):
        row = torch.arange(start, min(start + chunk, rows), device=x.device)
        point, image = row // batch, row % batch
        row_target = target[image] if isinstance(target, Tensor) else target
        grad = _gradient(model, points(point, image), row_target)[0]
        total = total.index_add(0, image, grad * _per_row(weights[point], grad))
        step(start // chunk + 1, chunks)
    return total


def _fixed_target(model: Forward, x: Tensor, target: Target) -> tuple[Tensor, Target]:
    """Scores of x ``(B,)``, and the target as ``(B,)`` class indices (a callable stays as it is)."""
    with torch.no_grad():
        score, index = scores(model(x.clone()), target)  # a copy: the model may change it in place
    return score, (target if index is None else index)


def _per_row(values: Tensor, like: Tensor) -> Tensor:
    """``(N,)`` values shaped ``(N, 1, ...)`` to scale rows of a tensor with ``like``'s rank."""
    return values.view(-1, *[1] * (like.dim() - 1))


def _check_options(x: Tensor, method: str, steps: int, samples: int, noise: float, batch_size: int | None) -> None:
    if method not in ATTRIBUTION_METHODS:
        raise OptionError(f"unknown method {method!r}; methods are {', '.join(ATTRIBUTION_METHODS)}")
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() < 1:
        got = f"{x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise OptionError(f"x must be a floating-point tensor with a batch dimension, got {got}")
    for name, value in (("steps", steps), ("samples", samples), ("batch_size", batch_size)):
        if value is None:
            continue
        if not isinstance(value, int) or value < 1:
            raise OptionError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(noise, (int, float)) or not noise >= 0:
        raise OptionError(f"noise must be >= 0 (a fraction of each image's max - min), got {noise!r}")


def attribute_through(
    forward: Forward,
    x: Tensor,
    method: Method,
    target: Target = None,
    *,
    baseline: Baseline = None,
    steps: int = 50,
    batch_size: int | None = None,
    progress: Progress = None,
) -> tuple[Tensor, Tensor | None]:
    """``attribute``'s saliency, input x gradient or integrated gradients of ``target`` through any
    ``forward`` of x (not only a model: ``token_attribution`` sends x, a model's embeddings, through
    the rest of the model), and integrated gradients' per-row delta (None for the others).

    ``batch_size=len(x)`` sends each integration step as one forward of the whole batch, so a
    ``forward`` may mix its rows (one number for the batch). ``progress`` hears ``(method, done,
    total)`` as ``attribute``'s does.
    """
    if method not in ("saliency", "input_x_gradient", "integrated_gradients"):
        raise OptionError(f"method={method!r}: attribute_through runs saliency, input_x_gradient, integrated_gradients")
    _check_options(x, method, steps, 1, 0.0, batch_size)
    with torch.inference_mode(False), torch.enable_grad(), once_each():
        x = x.detach().clone()
        step = partial(callback(progress), method)
        if method == "integrated_gradients":
            return _integrated_gradients(forward, x, target, baseline, steps, batch_size, step)
        step(0, 1)
        grad = _gradient(forward, x, target)[0]
        step(1, 1)
        return (grad if method == "saliency" else x * grad), None
