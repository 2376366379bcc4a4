"""Activation patching: which site (and which token) carries what tells a clean run from a corrupted one.

::

    effects = hookscope.patch_sweep(model, clean_x, corrupt_x, target=lambda out: out[:, 285] - out[:, 282],
                                    select="layer*")
    print(effects.table())        # site (x position) -> restored fraction
    effects.plot()                # a heatmap, PIL

The clean and the corrupted inputs run once each (the clean run under a capture of the selected
sites, ``select=``, the model's blocks by default: an encoder-decoder's encoder blocks); then, for
every site, and for every position of a token output ``(B, T, D)`` (batch first; a decoder block's
own positions), the clean activation is put into the corrupted run
(``edits.replace``) and the metric, ``target=``, measured. The restored fraction is
``(m_patched - m_corrupt) / (m_clean - m_corrupt)``: 0 where the patch does nothing, 1 where it
brings the clean answer back. The target is a callable of the model's output returning one
number or one per image, or a class (an int, one per image, a tensor: that logit, as
``hookscope.attribute`` reads it), or None: each image's top-1 class on the clean input (the
clean answer's logit); one value per image is averaged over the batch.

Batched where shapes allow: ``batch_size`` patched runs go through one forward pass as copies of the
corrupted batch stacked along dim 0, copy ``i`` patched at its own site. Everything runs under
``torch.no_grad()`` and in eval mode (``hookscope.core.modes``): in training mode BatchNorm would
mix the copies through their batch statistics, and update its running ones. A model left in
training mode gets a ``CaptureWarning``, and each module's flag back afterwards.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from ..base.deprecation import renamed
from ..base.words import closest
from ..core.blocks import blocks
from ..core.capture import capture
from ..core.modes import evaluating
from ..core.select import BLOCKS, Selector
from ..core.tree import flatten_layout, rebuild
from ..errors import CaptureWarning, EditError, EditWarning, NotCapturedError, OptionError
from ..explain.targets import Target, call_target, rows, scores
from ..progress import Progress, callback
from .edit import edit
from .effects import PatchSweep
from .ops import function

Metric = Callable[[Any], Tensor]  # the model's output -> one number, or one per image


@dataclass(frozen=True)
class Unit:
    """One patched run: the site and, for tokens, the position patched (None: the whole activation)."""

    site: str
    position: int | None


@renamed(sites="select", metric="target", copies="batch_size")
def patch_sweep(
    model: nn.Module,
    clean_x: Tensor,
    corrupt_x: Tensor,
    *,
    target: Metric | Target = None,
    select: Selector = ":blocks",
    positions: bool | None = None,
    key: str | None = None,
    call: int | None = None,
    batch_size: int = 8,
    output: str | None = None,
    progress: Progress = None,
) -> PatchSweep:
    """Patch each selected site's clean activation into the corrupted run and measure ``target`` (module doc).

    ``target``: a callable of the model's output (``hookscope.explain.targets``' one contract: one
    number, or one per image, averaged), a class index (an int, a list, a tensor), or None (the
    default): the logit of each image's top-1 class on the clean input. ``select``: the sites
    (``":blocks"``, the default: the model's repeated blocks; on an encoder-decoder model, T5 or
    BART, the encoder's, at the input's positions: name the decoder's, ``["decoder.block.0", ...]``,
    to patch them at the decoder's own positions). ``positions``: patch token outputs one position at
    a time (None: for 3-D outputs ``(B, T, D)``). ``key``: the tensor of a
    structured output that is patched (None: its only tensor, or the first of a tuple that is the
    hidden states, ``(B, T, D)`` with the input's batch, as a T5 layer's ``(hidden,
    position_bias)``; other outputs ask for it). ``call``: patch only call ``call`` (0-based) of a
    module that runs several times (None: every call). ``batch_size``: patched runs per forward
    pass. ``output``: the tensor of a structured model output the target reads (``"logits"``; None:
    a callable gets the whole output, a class index the first tensor).
    ``progress`` (``hookscope.progress``; default quiet) hears ``("patch_sweep", done, total)``
    after each patched forward pass. ``sites=``, ``metric=`` and ``copies=`` are the old names of
    ``select=``, ``target=`` and ``batch_size=`` (deprecated).

    Args:
        model: the network; it runs in eval mode, under no_grad.
        clean_x: the clean input batch.
        corrupt_x: the corrupted input, of the same shape.
        target: the metric: a callable of the model's output, or a class index (an int, a list, a tensor).
        select: the sites patched; ``":blocks"`` (the default) is the model's repeated blocks (an
            encoder-decoder's encoder blocks).
        positions: patch one position at a time; None does so for ``(B, T, D)`` outputs.
        key: the tensor of a structured output that is patched; None picks it (see above).
        call: patch only this call (0-based) of a module that runs several times; None patches every call.
        batch_size: patched runs per forward pass.
        output: the tensor of a structured model output the target reads; None as above.
        progress: None or False (quiet), True (lines on stderr), a stream, or a callable
            ``(stage, done, total)`` (``hookscope.progress``).

    Returns:
        A ``PatchSweep``, per site (and position), the fraction of the metric's gap restored.

    Raises:
        EditError: the inputs differ in shape, the target is the same on both, no ``target``, or no
            selected site ran.
        OptionError: a bad ``batch_size`` or ``call``.
        NotCapturedError: ``key`` names no tensor of a site's output.
        SelectionError: ``select`` matches no module.
    """
    if clean_x.shape != corrupt_x.shape:
        raise EditError(
            f"clean and corrupted inputs differ in shape: {tuple(clean_x.shape)} and {tuple(corrupt_x.shape)}"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise OptionError(f"batch_size= is the number of patched runs per forward pass, 1 or more, got {batch_size!r}")
    if call is not None and (isinstance(call, bool) or not isinstance(call, int) or call < 0):
        raise OptionError(f"call= is the index of one call (0, 1, ...) or None for every call, got {call!r}")
    with torch.no_grad(), evaluating(model, "patch_sweep()", wrappers=1):  # 1: @renamed
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CaptureWarning)  # sites that never ran: said once, below
            with capture(model, _sweep_sites(model) if select == BLOCKS else select) as cap:
                clean_out = model(clean_x)
        metric = _metric(target, output, clean_out)
        m_clean = _scalar(metric(clean_out))
        m_corrupt = _scalar(metric(model(corrupt_x)))
        if math.isclose(m_clean, m_corrupt, rel_tol=0.0, abs_tol=1e-12):
            raise EditError(
                f"the target is {m_clean:.6g} on both the clean and the corrupted input: nothing to restore"
            )
        clean, keys = _clean_values(cap, key, call, tuple(clean_x.shape))
        units = _units(clean, positions)
        values: dict[Unit, float] = {}
        step, passes = partial(callback(progress), "patch_sweep"), math.ceil(len(units) / batch_size)
        step(0, passes)
        for start in range(0, len(units), batch_size):
            group = units[start : start + batch_size]
            values.update(zip(group, _patched(model, corrupt_x, group, clean, keys, metric, call), strict=True))
            step(start // batch_size + 1, passes)
    forwards = 2 + math.ceil(len(units) / batch_size)
    return PatchSweep.made(values, m_clean, m_corrupt, forwards=forwards)


def _sweep_sites(model: nn.Module) -> list[str] | str:
    """What ``select=":blocks"`` patches: the model's blocks, or on an encoder-decoder model (T5, BART:
    blocks below a module named ``encoder`` and below one named ``decoder``) the encoder's alone, whose
    positions are the input's tokens. Decoder blocks are patched when selected by name
    (``["decoder.block.0", ...]``), at the decoder's own positions.

    Args:
        model: the network.

    Returns:
        The encoder blocks' names, or ``":blocks"`` when the model is not an encoder-decoder.
    """
    names = [name for name, _ in blocks(model)]
    encoder = [n for n in names if "encoder" in n.split(".")]
    return encoder if encoder and any("decoder" in n.split(".") for n in names) else BLOCKS


def _metric(target: Metric | Target, key: str | None, clean: Any) -> Metric:
    """The target as a function of the model's output (``hookscope.explain.targets.call_target``'s
    contract, ``key`` the tensor it reads when given): a callable as it is, a class as its logit,
    None as the logit of each row's top-1 class on the clean input ``clean``."""
    if callable(target) and not isinstance(target, Tensor):
        function: Metric = target
        return lambda out: call_target(function, out, rows(out, key), key=key, caller="patch_sweep()")
    index: Target = target if target is not None else scores(clean, None, key)[1]

    def logit(output: Any) -> Tensor:
        return scores(output, index, key)[0]

    return logit


def _scalar(value: Tensor) -> float:
    """A target's value as one number: the mean of one value per image."""
    return float(value.detach().double().mean())


def _clean_values(
    cap: Any, key: str | None, call: int | None, shape: tuple[int, ...]
) -> tuple[dict[str, list[Tensor]], dict[str, str]]:
    """Per site, the clean tensor of every call at the patched key; and that key."""
    clean, keys = {}, {}
    idle = [site for site in cap if not cap[site].calls]
    if len(idle) == len(cap):
        raise EditError(f"no site of the sweep ran on the clean input ({', '.join(idle[:4])}); pick sites that run")
    if idle:
        warnings.warn(
            f"patch_sweep leaves out {', '.join(map(repr, idle[:6]))}: never called in the forward pass",
            EditWarning,
            stacklevel=3,
        )
    for site in (s for s in cap if cap[s].calls):
        calls = cap[site].calls
        if call is not None and call >= len(calls):
            raise NotCapturedError(
                f"call={call} is not a call of {site!r}, which ran {len(calls)} time(s); pick call < {len(calls)}"
            )
        held = calls[0].keys("output")
        chosen = key if key is not None else _default_key(held, calls[0], shape)
        if key is not None and key not in held:
            raise NotCapturedError(
                f"site {site!r} returns {', '.join(held) or 'no tensor'}, not key={key!r}{closest(str(key), held)}; "
                "pass one of them as key="
            )
        if chosen is None:
            raise OptionError(
                f"site {site!r} returns {', '.join(held) or 'no tensor'} and its first is not (B, T, D) hidden states "
                f"of the input's {shape[0]} rows; pass key= to name the one to patch"
            )
        clean[site], keys[site] = [call.get("output", chosen) for call in calls], chosen
    return clean, keys


def _default_key(held: list[str], first: Any, shape: tuple[int, ...]) -> str | None:
    """The key patched without ``key=``: the only tensor; or a tuple's first, when it is the layer's
    hidden states, ``(B, T, D)`` with the input's batch (a T5 or BLOOM block's ``(hidden, bias, ...)``;
    ``T`` is the input's length, or a decoder's own)."""
    if len(held) == 1:
        return held[0]
    if not held or held[0] != "out[0]":
        return None
    hidden = first.get("output", "out[0]")
    return "out[0]" if hidden.dim() == 3 and hidden.shape[0] == shape[0] and hidden.is_floating_point() else None


def _units(clean: dict[str, list[Tensor]], positions: bool | None) -> list[Unit]:
    units = []
    for site, values in clean.items():
        tokens = values[0].dim() == 3 if positions is None else positions
        if tokens and values[0].dim() < 2:
            raise OptionError(
                f"positions=True needs an output of shape (B, T, ...) at {site!r}, got {tuple(values[0].shape)}"
            )
        units += [Unit(site, p) for p in range(values[0].shape[1])] if tokens else [Unit(site, None)]
    return units


def _patched(
    model: nn.Module,
    corrupt_x: Tensor,
    group: Sequence[Unit],
    clean: dict[str, list[Tensor]],
    keys: dict[str, str],
    metric: Metric,
    call: int | None,
) -> list[float]:
    """The metric of each unit of ``group``, patched in copy ``i`` of one stacked forward pass."""
    rows = len(corrupt_x)
    stacked = corrupt_x.repeat(len(group), *([1] * (corrupt_x.dim() - 1)))  # (copies * B, ...)
    by_site: dict[str, list[tuple[int, int | None]]] = {}
    for copy, unit in enumerate(group):
        by_site.setdefault(unit.site, []).append((copy, unit.position))

    def patcher(site: str) -> Callable[[Tensor, int], Tensor]:
        def patch(tensor: Tensor, call: int) -> Tensor:
            out, source = tensor.clone(), clean[site][call]
            for copy, position in by_site[site]:
                part = slice(copy * rows, (copy + 1) * rows)
                if position is None:
                    out[part] = source
                else:
                    out[part, position] = source[:, position]
            return out

        return patch

    plan = {site: function(patcher(site), key=keys[site], call=call) for site in by_site}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EditWarning)  # a patch that changes nothing is a finding here
        with edit(model, plan, strict=False):  # type: ignore[arg-type]
            out = model(stacked)
    return [_scalar(metric(_copy(out, i, rows, len(group)))) for i in range(len(group))]


def _copy(out: Any, index: int, rows: int, copies: int) -> Any:
    """Copy ``index`` of a stacked output: every tensor with ``copies * rows`` rows cut to its own."""
    part = slice(index * rows, (index + 1) * rows)
    if isinstance(out, Tensor):
        return out[part]
    leaves, layout = flatten_layout(out)
    return rebuild(layout, {k: t[part] if t.dim() and len(t) == copies * rows else t for k, t in leaves})
