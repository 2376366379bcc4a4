"""Why something asked for was not captured: the reasons, in words, found once at the end of a capture.

The capture records a reason where it knows one as the hooks run (``Call.missing``: the pass ran
under no_grad, no input requires grad); ``site_problems`` adds what only the end of the block can
tell (never called, no backward pass, a backward pass that did not reach the site) and returns
every (kind, reason) of a site; ``problems`` groups them into the lines ``Capture`` warns, one per
reason. ``annotate`` names the module an exception escaped from.
When no site was called at all and ``torch.compile`` has compiled code in the process, the
likely cause is named (``never_called_reason``): a model run inside a compiled function; else each
site that was never called gets its own cause (``core.uncalled``: a ``.forward`` call, work done
as a function, training mode only, a branch not taken, ...).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from torch import nn

from ..errors import CaptureWarning
from .call import Call
from .compiled import compiled_frames, named_modules
from .experts import EXPERT
from .kinds import Kind, at
from .records import Record
from .uncalled import LIKELY, never_called

if TYPE_CHECKING:
    from .policy import Keeper

NO_GRAD_MODE = "the forward pass ran under torch.no_grad() or torch.inference_mode(); run it with gradients enabled"
NO_BACKWARD = "no backward pass ran inside the `with` block; call .backward() or torch.autograd.grad() before it ends"
AWAITS_RECOMPUTE = (
    "it ran in a reentrant torch.utils.checkpoint region, whose gradients come when the backward pass "
    "recomputes it, and no backward pass did inside the block; call .backward() before the block ends"
)
IN_TRANSFORM_START = "it ran inside a torch.func transform"
IN_TRANSFORM = (
    IN_TRANSFORM_START + " ({transform}), whose wrapped tensors a hook cannot copy out; "
    "call the model outside the transform to capture it (the call itself ran as usual)"
)
FUNCTIONAL_CALL = (
    "it ran under torch.func.functional_call, which puts the tensors passed in place of the module's own "
    "parameters for the call, so the backward pass gives those tensors the gradients and the parameters get "
    "none; read the gradients of the tensors you passed (their .grad after .backward(), or "
    "torch.autograd.grad(loss, list(params.values()))), or pass the module's own parameters "
    "(dict(model.named_parameters())) to capture param_grad"
)
NOT_REACHED = "the backward pass did not reach it (the loss does not depend on it)"
IN_TORCHSCRIPT = (
    "it is part of a torch.jit.trace'd (or scripted) module, which runs as one TorchScript graph and never "
    "calls its submodules; select the traced module itself, or capture the eager model before tracing it"
)
TORCHSCRIPT_TYPES = ("TracedModule", "RecursiveScriptModule", "ScriptModule")  # a submodule of a traced module
NO_TRAINABLE = "it has no parameter that requires grad"
IN_COMPILED_CODE = (
    "it was never called inside the block, and torch.compile has compiled code in this process: if the "
    "model runs inside a torch.compile'd function, hooks added after it was compiled never run; run that "
    "call under torch.compiler.set_stance('force_eager') or call the model outside the compiled function "
    "(otherwise: hooks run through module(x), not module.forward(x))"
)


def never_called_reason(records: Iterable[Record], *, eager: bool, cleared: bool) -> str | None:
    """``IN_COMPILED_CODE`` when no site was called (none had calls before a ``clear()`` either, and
    the capture did not run the model ``eager``) while dynamo has compiled frames, else None: each
    site has its own cause (``core.uncalled``)."""
    if eager or cleared or any(record.calls for record in records) or not compiled_frames():
        return None
    return IN_COMPILED_CODE


def uncalled_reasons(records: Mapping[str, Record], model: nn.Module | None, compiled: str | None,
                     cleared: set[str]) -> dict[str, str]:  # fmt: skip
    """Site -> why it was never called, for each site that was not (``compiled`` stands for all when given)."""
    idle = [n for n, r in records.items() if not r.calls and n not in cleared and r.type != EXPERT]
    if not idle or compiled is not None or model is None:
        return dict.fromkeys(idle, compiled or LIKELY)
    modules = dict(named_modules(model))
    return {name: never_called(name, modules, idle) for name in idle}


def problems(
    records: Mapping[str, Record],
    gradient_kinds: tuple[Kind, ...],
    *,
    cleared: set[str],
    params_reached: set[str],
    grads_seen: bool,
    eager: bool,
    model: nn.Module | None = None,
) -> list[str]:
    """The warnings of a capture at exit: one line per reason, naming every site it applies to.

    ``cleared``: sites that had calls before a ``clear()``; ``params_reached``: sites whose parameters
    a backward pass reached; ``eager``: the capture ran a compiled model eagerly; ``model``: the
    captured model, whose code says why a site was never called.
    """
    compiled = never_called_reason(records.values(), eager=eager, cleared=bool(cleared))
    never = uncalled_reasons(records, model, compiled, cleared)
    grouped: dict[tuple[str, str], list[str]] = {}
    for record in records.values():
        found = site_problems(
            record, gradient_kinds, cleared=record.name in cleared, params_reached=record.name in params_reached,
            grads_seen=grads_seen, never_called=never.get(record.name, LIKELY),
        )  # fmt: skip
        for kind, reason in found:
            grouped.setdefault((kind, reason), []).append(record.name)
    lines = []
    for (kind, reason), sites in grouped.items():
        names = ", ".join(repr(s) for s in sites[:6]) + (f" and {len(sites) - 6} more" if len(sites) > 6 else "")
        what = "nothing captured" if kind == "call" else f"no {kind}"
        lines.append(f"hookscope: {what} for {names}: {reason}")
    return lines


def transformed(records: Iterable[Record], kind: Kind) -> list[str]:
    """The one warning for the calls made inside a torch.func transform (none if there were none);
    it stands for every kind those calls miss."""
    sites = [r.name for r in records if any(c.missing.get(kind, "").startswith(IN_TRANSFORM_START) for c in r.calls)]
    if not sites:
        return []
    why = next(c.missing[kind] for r in records if r.name == sites[0] for c in r.calls if kind in c.missing)
    names = ", ".join(repr(s) for s in sites[:6]) + (f" and {len(sites) - 6} more" if len(sites) > 6 else "")
    return [f"hookscope: nothing captured for calls of {names}: {why}"]


def annotate(exc: BaseException, raised: Mapping[int, tuple[str, int]]) -> None:
    """Name the module an escaping exception came from (or the one it was raised from): ``raised`` maps
    ``id(exception)`` to the (module, call index) it escaped from first. Said once, however many blocks saw it."""
    cause: BaseException | None = exc
    while cause is not None:
        site = raised.get(id(cause))
        if site is not None:
            note = f"hookscope: raised inside module {site[0]!r} (call {site[1]})"
            if note not in getattr(exc, "__notes__", ()):
                exc.add_note(note)
            return
        cause = cause.__cause__ or cause.__context__


def does_not_require_grad(what: str) -> str:
    return f"its {what} does not require grad (nothing before it does; call x.requires_grad_() or unfreeze parameters)"


def site_problems(
    record: Record,
    gradient_kinds: tuple[Kind, ...],
    *,
    cleared: bool,
    params_reached: bool,
    grads_seen: bool,
    never_called: str = LIKELY,
) -> Iterator[tuple[str, str]]:
    """Every (kind, reason) that ``record`` holds nothing of; the reasons are also filed in its ``missing``.

    ``cleared``: the site had calls before a ``clear()``; ``params_reached``: a backward pass reached
    its parameters; ``grads_seen``: a backward pass reached any hooked tensor of the capture;
    ``never_called``: the reason given when the site was never called.
    """
    if record.type == EXPERT:  # a fused expert (core.experts): no call is no token routed to it (routing() says)
        yield from ((k, record.missing[k]) for k in gradient_kinds if record.calls and k in record.missing)
        return
    if not record.calls:
        if cleared:
            return
        reason = IN_TORCHSCRIPT if record.type in TORCHSCRIPT_TYPES else never_called
        record.missing["call"] = reason
        yield "call", reason
        return
    for kind in gradient_kinds:
        if kind in record.kinds:
            reasons = {_grad_problem(call, kind, grads_seen) for call in record.calls} - {None}
            yield from ((kind, r) for r in sorted(r for r in reasons if r is not None))
    if "param_grad" in record.kinds and not params_reached:
        said = {call.missing.get("param_grad") for call in record.calls}  # no_grad, a torch.func transform
        common = said.pop() if len(said) == 1 else None
        reason = record.missing.get("param_grad") or common or no_grad_reason(grads_seen)
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


def warn_at_exit(
    records: Mapping[str, Record],
    keeper: Keeper,
    kinds: tuple[Kind, ...],
    eager: bool,
    *,
    cleared: set[str],
    params_reached: set[str],
    grads_seen: bool,
    model: nn.Module | None = None,
) -> None:
    """The capture's warnings when its block ends: what could not be captured (``model``'s code says why
    a site was never called), and references changed in place."""
    grad_kinds = (*at("input_grad", kinds), *at("output_grad", kinds))
    found = problems(records, grad_kinds, cleared=cleared, params_reached=params_reached, grads_seen=grads_seen,
                     eager=eager, model=model)  # fmt: skip
    in_transform = transformed(records.values(), kinds[0])
    for line in [*in_transform, *(line for line in found if IN_TRANSFORM_START not in line)]:
        warnings.warn(line, CaptureWarning, stacklevel=4)  # the user's with: Block.__exit__, _finish, here
    modified = keeper.modified_references()
    if modified:
        warnings.warn(
            f"hookscope: {', '.join(modified[:6])} changed in place after capture (clone=False stores "
            "references); capture with clone=True to keep the values the hooks saw",
            CaptureWarning,
            stacklevel=4,
        )
