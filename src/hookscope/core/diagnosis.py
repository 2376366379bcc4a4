"""Why something asked for was not captured: the reasons, in words, found once at the end of a capture.

The capture records a reason where it knows one as the hooks run (``Call.missing``: the pass ran
under no_grad, no input requires grad); ``site_problems`` adds what only the end of the block can
tell (never called, no backward pass, a backward pass that did not reach the site) and returns
every (kind, reason) of a site, which ``Capture`` turns into one ``CaptureWarning`` per reason.
"""

from __future__ import annotations

from collections.abc import Iterator

from .kinds import Kind
from .records import Call, Record

NO_GRAD_MODE = "the forward pass ran under torch.no_grad() or torch.inference_mode(); run it with gradients enabled"
NO_BACKWARD = "no backward pass ran inside the `with` block; call .backward() or torch.autograd.grad() before it ends"
NOT_REACHED = "the backward pass did not reach it (the loss does not depend on it)"
NEVER_CALLED = "it was never called inside the block (hooks run through module(x), not module.forward(x))"
NO_TRAINABLE = "it has no parameter that requires grad"


def does_not_require_grad(what: str) -> str:
    return f"its {what} does not require grad (nothing before it does; call x.requires_grad_() or unfreeze parameters)"


def site_problems(
    record: Record, gradient_kinds: tuple[Kind, ...], *, cleared: bool, params_reached: bool, grads_seen: bool
) -> Iterator[tuple[str, str]]:
    """Every (kind, reason) that ``record`` holds nothing of; the reasons are also filed in its ``missing``.

    ``cleared``: the site had calls before a ``clear()``; ``params_reached``: a backward pass reached
    its parameters; ``grads_seen``: a backward pass reached any hooked tensor of the capture.
    """
    if not record.calls:
        if cleared:
            return
        record.missing["call"] = NEVER_CALLED
        yield "call", NEVER_CALLED
        return
    for kind in gradient_kinds:
        if kind in record.kinds:
            reasons = {_grad_problem(call, kind, grads_seen) for call in record.calls} - {None}
            yield from ((kind, r) for r in sorted(r for r in reasons if r is not None))
    if "param_grad" in record.kinds and not params_reached:
        no_grad = all(call.missing.get("param_grad") == NO_GRAD_MODE for call in record.calls)
        reason = record.missing.get("param_grad") or (NO_GRAD_MODE if no_grad else no_grad_reason(grads_seen))
        record.missing["param_grad"] = reason
        yield "param_grad", reason


def no_grad_reason(grads_seen: bool) -> str:
    """Why a hooked gradient never arrived: no backward pass at all, or one that did not reach it."""
    return NOT_REACHED if grads_seen else NO_BACKWARD


def _grad_problem(call: Call, kind: Kind, grads_seen: bool) -> str | None:
    if call.error is not None:
        return None
    if kind not in call.missing and kind not in call.reached and call.watched.get(kind):
        call.missing[kind] = no_grad_reason(grads_seen)
    return call.missing.get(kind)
