"""``hookscope.steer_sweep``: does adding a vector move the model the way it should, on each example, and at what cost?

::

    sweep = hookscope.steer_sweep(model, prompts, direction, select="transformer.h.1",
                                  completions=(yes_ids, no_ids), neutral=other_prompts)
    print(sweep.table())     # per scale: propensity, KL on the neutral prompts, calls edited of made
    sweep.slopes             # (N,) each example's steerability; sweep.anti_steerable: the share below 0

At each scale ``s`` the selected modules get ``edits.add(s * v, positions=, match_norm=)`` (one edit
block per forward pass, so each pass is tallied and checked like any edit; scale 0 is the model
unedited). The propensity of an example is ``target(output)`` (one value per row, the house's one
target contract, ``hookscope.explain.targets``), or with ``completions=(a, b)`` the log-probability
of completion ``a`` less that of ``b`` after the prompt, each read teacher-forced from one forward pass
of prompt + completion (a token, one per example, or ``(N, L)`` tokens: the sum of their log-probabilities).
The side effect is the KL divergence of the next-token distribution at every position of the
``neutral`` prompts, unsteered against steered. Everything runs under ``torch.no_grad()`` in eval mode.

The vector is a ``(D,)`` tensor for every site, or a direction holding one per site: anything with
``.vector(site)`` or a ``.vectors`` mapping (``vector_of``). Prompts are a ``(N, T)`` tensor of token
ids, cut into ``batch_size`` rows, or a list of ``(B, T)`` / ``(T,)`` tensors, one forward pass each
(prompts of different lengths).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from ..core.modes import evaluating
from ..core.select import Selector, select_modules
from ..edits.edit import edit
from ..edits.edit_op import EditOp
from ..edits.ops import add
from ..edits.parts import Positions
from ..errors import OptionError
from ..explain.targets import call_target, logits
from ..progress import Progress, callback
from . import views  # noqa: F401  (registers the table, picture, notebook view and section)
from .result import SteerSweep, kl_divergence

Prompts = Tensor | Sequence[Tensor]
Completion = int | Sequence[int] | Tensor
Pair = tuple[Completion, Completion]
Measure = Callable[[Callable[[Tensor], Any], Tensor, int], Tensor]  # (run, batch, first row) -> (B,)


def steer_sweep(
    model: nn.Module,
    inputs: Prompts,
    vector: Tensor | Any,
    *,
    select: Selector,
    target: Callable[[Any], Tensor] | None = None,
    completions: Pair | None = None,
    scales: Sequence[float] = (-4.0, -2.0, 0.0, 2.0, 4.0),
    neutral: Prompts | None = None,
    positions: Positions | None = None,
    match_norm: bool = False,
    key: str | None = None,
    output: str | None = None,
    batch_size: int = 8,
    progress: Progress = None,
) -> SteerSweep:
    """Add ``vector`` times each scale at the modules of ``select`` and measure each prompt's propensity (module doc).

    Args:
        model: the network; it runs in eval mode, under no_grad.
        inputs: the prompts: a ``(N, T)`` tensor of token ids, or a list of ``(B, T)`` or ``(T,)`` tensors.
        vector: a ``(D,)`` tensor, or a direction with ``.vector(site)`` or ``.vectors[site]``.
        select: the modules steered (a selector: a name, a glob, a type...); each gets the vector.
        target: the propensity, a callable of the model's output returning one value per row; or None
            with ``completions``.
        completions: ``(a, b)``: the propensity is log p(a | prompt) - log p(b | prompt); each an int
            token, one token per example ``(N,)``, or ``(N, L)`` tokens.
        scales: the multipliers of the vector; 0 is the model unedited.
        neutral: prompts on which the side effect (KL against the unsteered model) is measured, as ``inputs``.
        positions: the tokens steered, as ``edits.add(positions=)``; None steers every token.
        match_norm: add ``vector * |x|`` at each token (``edits.add(match_norm=)``).
        key: the tensor of a structured module output that is steered (``out[0]``); None: its only one.
        output: the tensor of a structured model output read as the logits (``"logits"``); None: its first tensor.
        batch_size: prompts per forward pass when ``inputs`` is one tensor.
        progress: None or False (quiet), True (lines on stderr), a stream, or a callable
            ``(stage, done, total)`` (``hookscope.progress``).

    Returns:
        A ``SteerSweep``: propensity per example and scale, slopes, KL per scale, calls edited and made.

    Raises:
        OptionError: no target and no completions (or both), fewer than two scales, prompts or
            completions that are not token ids, a bad ``batch_size``, a direction without this site.
        EditError: an edit did not take effect (``positions="new"``: a teacher-forced pass has no new token).
        SelectionError: ``select`` matches no module.
        TargetError: ``target`` returned other than one value per row.
    """
    sites = [name for name, _ in select_modules(model, select)]
    vectors = {site: vector_of(vector, site) for site in sites}
    grid = _scales(scales)
    batches, rest = _batches(inputs, batch_size, "inputs"), _batches(neutral, batch_size, "neutral")
    measure = _measure(target, completions, output, sum(len(b) for b in batches))
    step = partial(callback(progress), "steer_sweep")
    columns, kls, edited, forwards = [], [], [], []
    with torch.no_grad(), evaluating(model, "steer_sweep()"):
        before = [logits(model(batch), output) for batch in rest]
        step(0, len(grid))
        for done, scale in enumerate(grid.tolist(), 1):
            steered = {} if scale == 0 else vectors
            run = _Runs(model, {s: add(scale * v, positions=positions, match_norm=match_norm, key=key)
                                for s, v in steered.items()})  # fmt: skip
            columns.append(torch.cat([measure(run, batch, _first(batches, i)) for i, batch in enumerate(batches)]))
            kls.append(_kl(run, rest, before, output) if rest and scale != 0 else 0.0)
            edited.append(run.edited)
            forwards.append(run.forwards)
            step(done, len(grid))
    kl = torch.tensor(kls, dtype=torch.float64) if rest else None
    return SteerSweep(tuple(sites), grid, torch.stack(columns, dim=1), kl, tuple(edited), tuple(forwards))


def vector_of(direction: Tensor | Any, site: str) -> Tensor:
    """The ``(D,)`` vector of ``direction`` at ``site``: a tensor itself, else ``.vector(site)`` or ``.vectors[site]``.

    Args:
        direction: a ``(D,)`` tensor, or an object with ``.vector(site)`` or a ``.vectors`` mapping.
        site: the module's name.

    Returns:
        The vector, detached.

    Raises:
        OptionError: the direction has no vector for ``site``, or it is not a ``(D,)`` tensor.
    """
    found: Any = None
    if isinstance(direction, Tensor):
        found = direction
    elif callable(getattr(direction, "vector", None)):
        try:
            found = direction.vector(site)
        except LookupError:
            found = None
    elif isinstance(getattr(direction, "vectors", None), Mapping):
        found = direction.vectors.get(site)
    if found is None:
        raise OptionError(
            f"steer_sweep takes a (D,) tensor or a direction with .vector(site) or .vectors, and has none for "
            f"{site!r} in a {type(direction).__name__}"
        )
    if not isinstance(found, Tensor) or found.dim() != 1:
        raise OptionError(f"the vector for {site!r} must be a (D,) tensor, got {type(found).__name__}")
    return found.detach()


class _Runs:
    """Forward passes at one scale, each in an edit block of its own: counted, and the calls they edited."""

    def __init__(self, model: nn.Module, ops: dict[Selector, EditOp]) -> None:
        self.model, self.ops, self.forwards, self.edited = model, ops, 0, 0

    def __call__(self, x: Tensor) -> Any:
        self.forwards += 1
        if not self.ops:
            return self.model(x)
        with edit(self.model, self.ops) as block:
            out = self.model(x)
        self.edited += sum(len(row.calls) for row in block.report().rows)
        return out


def _measure(target: Callable[[Any], Tensor] | None, completions: Pair | None, output: str | None, n: int) -> Measure:
    """The propensity of a batch: ``target`` of one pass, or the log-probability gap of two completions."""
    if (target is None) == (completions is None):
        raise OptionError("steer_sweep needs target= (a callable of the output) or completions=(a, b), not both")
    if target is not None:
        if not callable(target):
            raise OptionError(f"target= is a callable of the model's output, got {type(target).__name__}")
        chosen = target
        return lambda run, batch, first: call_target(
            chosen, run(batch), len(batch), key=output, per_row=True, caller="steer_sweep()"
        ).double()
    if not isinstance(completions, tuple) or len(completions) != 2:
        raise OptionError(f"completions= is a pair (a, b) of tokens, got {type(completions).__name__}")
    a, b = (_completion(side, n) for side in completions)

    def gap(run: Callable[[Tensor], Any], batch: Tensor, first: int) -> Tensor:
        rows = slice(first, first + len(batch))
        return _log_prob(run, batch, a[rows], output) - _log_prob(run, batch, b[rows], output)

    return gap


def _log_prob(run: Callable[[Tensor], Any], batch: Tensor, tokens: Tensor, output: str | None) -> Tensor:
    """``log p(tokens | batch)`` per row, teacher-forced: the sum over the completion's tokens (B,)."""
    length, extra = batch.shape[1], tokens.shape[1]
    out = logits(run(torch.cat([batch, tokens.to(batch.device)], dim=1)), output)  # (B, T + L, V)
    read = torch.log_softmax(out[:, length - 1 : length - 1 + extra].double(), dim=-1)  # (B, L, V)
    return read.gather(-1, tokens.to(read.device)[..., None]).squeeze(-1).sum(dim=1)


def _completion(side: Completion, n: int) -> Tensor:
    """A completion as ``(N, L)`` token ids: an int for every example, ``(N,)`` one each, or ``(N, L)``."""
    tokens = torch.as_tensor(side)
    if tokens.is_floating_point() or tokens.dtype == torch.bool or tokens.dim() > 2:
        got = f"{tokens.dtype} {tuple(tokens.shape)}"
        raise OptionError(f"a completion is token ids: an int, (N,) or (N, L), got {got}")
    if tokens.dim() == 0:
        return tokens.reshape(1, 1).expand(n, 1)
    if len(tokens) != n:
        raise OptionError(f"a completion has {len(tokens)} rows for {n} prompts; give one per prompt")
    return tokens.reshape(n, -1)


def _kl(run: Callable[[Tensor], Any], batches: list[Tensor], before: list[Tensor], output: str | None) -> float:
    """The mean KL divergence over every position of the neutral prompts, unsteered against steered."""
    found = [kl_divergence(b, logits(run(x), output)).reshape(-1) for x, b in zip(batches, before, strict=True)]
    return float(torch.cat(found).mean())


def _scales(scales: Sequence[float]) -> Tensor:
    grid = torch.as_tensor([float(s) for s in scales], dtype=torch.float64)
    if len(set(grid.tolist())) < 2:
        raise OptionError(f"scales= needs two different scales or more to fit a slope, got {list(scales)}")
    return grid


def _batches(prompts: Prompts | None, batch_size: int, what: str) -> list[Tensor]:
    """The forward passes' token ids: a tensor cut into ``batch_size`` rows, or each tensor of a list."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise OptionError(f"batch_size= is the number of prompts per forward pass, 1 or more, got {batch_size!r}")
    if prompts is None:
        return []
    if isinstance(prompts, Tensor):
        rows = range(0, len(prompts), batch_size)
        listed = [prompts[i : i + batch_size] for i in rows] if prompts.dim() == 2 else [prompts]
    else:
        listed = list(prompts)
    batches = [p[None] if isinstance(p, Tensor) and p.dim() == 1 else p for p in listed]
    wrong = [b for b in batches if not isinstance(b, Tensor) or b.dim() != 2 or b.is_floating_point()]
    if not batches or wrong:
        raise OptionError(f"{what}= is token ids: a (N, T) tensor, or a list of (B, T) or (T,) tensors")
    return batches


def _first(batches: list[Tensor], index: int) -> int:
    return sum(len(b) for b in batches[:index])
