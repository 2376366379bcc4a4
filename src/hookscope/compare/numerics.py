"""``divergence``: where two models that should compute the same thing part, site by site, on one input.

::

    div = hookscope.compare.divergence(model, quantized, x)       # or a compiled, bf16, fine-tuned copy
    div.first(rtol=1e-2)                                         # the first site in forward order past it
    div.table(); div.plot(rtol=1e-2)

Modules are matched by name (the eager names: a ``torch.compile`` wrapper's ``_orig_mod`` and a
``DataParallel``'s ``module.`` are left out) and calls by their index; each tensor of each call is
compared in float64: the relative L2 error ``|B - A| / |A|``, the cosine, the largest ``|B - A|``
and its index. The model's output is the last row, ``(output)``. A pair whose modules, calls, keys
or shapes do not match is an error that lists the differences.

A compiled model runs eagerly while hooks are on it (``hookscope.core.compiled``), so its sites hold
the eager model's values: its ``(output)`` row is then taken from a second, hook-free run of the
compiled code, and a note (and a warning) says so. ``autocast=torch.bfloat16`` runs B under
``torch.autocast`` of that dtype (A as it is), so a model can be compared with itself in mixed precision.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..base.deprecation import warn_renamed
from ..base.display import Shows, plot_of, table_of
from ..base.words import closest
from ..core.call import Call
from ..core.capture import Capture, capture
from ..core.compiled import is_compiled, named_modules, unwrap
from ..core.modes import evaluating
from ..core.records import forward_order
from ..core.select import Selector, select_modules
from ..core.tree import flatten
from ..errors import CaptureWarning, CompiledWarning, MismatchError, NotCapturedError, OptionError
from ..store.batches import default_forward, model_device
from .sources import unit_name

if TYPE_CHECKING:
    from PIL.Image import Image

OUTPUT = "(output)"
SHOWN = 6  # differences listed in a mismatch error


@dataclass(frozen=True)
class Site:
    """One tensor of one call of one module, compared: B against A, in float64.

    Attributes:
        name: the site and the tensor (``layer1``, ``block call 1``, ``encoder out[0]``, ``(output)``).
        shape: the tensor's shape.
        relative: ``|B - A| / |A|`` (L2 over every element); inf when A is 0 and B is not.
        cosine: ``A . B / (|A| |B|)``; NaN when either is 0.
        max_abs: ``max |B - A|``.
        where: the index of that largest difference.
    """

    name: str  # "layer1", "block call 1", "encoder out[0]", "(output)"
    shape: tuple[int, ...]
    relative: float  # |B - A| / |A| (L2 over every element); inf when A is 0 and B is not
    cosine: float  # A . B / (|A| |B|); nan when either is 0
    max_abs: float  # max |B - A|
    where: tuple[int, ...]  # the index of that largest difference


@dataclass(frozen=True)
class Divergence(Shows):
    """Per site, in A's forward order, how far B is from A; the model's output last.

    Attributes:
        sites: one ``Site`` per compared tensor, in A's forward order, the model's output last.
        notes: what the numbers are made of (a compiled run, autocast).
    """

    sites: tuple[Site, ...]
    notes: tuple[str, ...] = ()  # what the numbers are made of (a compiled run, autocast)

    def __repr__(self) -> str:
        worst = max(self.sites, key=lambda s: s.relative if not math.isnan(s.relative) else math.inf)
        return (
            f"<Divergence over {len(self.sites)} sites; largest relative error {worst.relative:.3g} at {worst.name!r}>"
        )

    def __getitem__(self, site: str) -> Site:
        for row in self.sites:
            if row.name == site:
                return row
        names = [row.name for row in self.sites]
        raise NotCapturedError(f"{site!r} is not a site of this divergence ({len(names)} sites"
                               f"{closest(site, names)}); list them with [s.name for s in div.sites]")  # fmt: skip

    def first(self, rtol: float = 1e-2) -> Site | None:
        """The first site in forward order whose relative error is past ``rtol`` (or NaN); None if none is.

        Args:
            rtol: the tolerated relative error.

        Returns:
            The first ``Site`` past it, or None.
        """
        return next((s for s in self.sites if not s.relative <= rtol), None)

    def table(self) -> str:
        """A row per site: shape, relative error, cosine, max ``|difference|`` and where (text).

        Returns:
            The table, as text.
        """
        return table_of(self)

    def plot(self, *, rtol: float | None = None) -> Image:
        """The relative error per site in forward order, log scale; ``rtol`` draws the tolerance.

        Args:
            rtol: draw this tolerance as a line; None draws none.

        Returns:
            A PIL image of the chart.

        Raises:
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        return plot_of(self, rtol=rtol)


def divergence(
    model_a: nn.Module,
    model_b: nn.Module,
    x: Any,
    *,
    select: Selector | None = None,
    autocast: torch.dtype | None = None,
) -> Divergence:
    """Run ``model_a`` and ``model_b`` on ``x`` (in eval mode, under no_grad) and compare every output
    of the modules ``select`` picks in A (None: every leaf module), matched by name in B, call by call.

    ``x``: a tensor, a tuple of positional arguments (``model(*x)``, as ``module_graph`` reads it) or a dict
    of keyword arguments. A tuple the model cannot take is read as before, ``(inputs, ...)`` (its first
    item fed), for one release, with a ``DeprecationWarning``.
    ``autocast``: a dtype (``torch.bfloat16``, ``torch.float16``) B runs under ``torch.autocast`` in.

    Args:
        model_a: the reference model.
        model_b: the model compared with it, with the same module names.
        x: the input (see above).
        select: A's modules compared; None takes every leaf module.
        autocast: a floating dtype B runs under ``torch.autocast`` in; None runs B as it is.

    Returns:
        A ``Divergence``, per site, relative error, cosine, max ``|difference|`` and where.

    Raises:
        OptionError: ``autocast`` is not a floating dtype.
        ModelError: the models' modules do not match by name.
        SelectionError: ``select`` matches no module.
    """
    if autocast is not None and not (isinstance(autocast, torch.dtype) and autocast.is_floating_point):
        raise OptionError(f"autocast={autocast!r} is not a floating dtype; pass e.g. autocast=torch.bfloat16")
    _check_pair(model_a, model_b)
    x = _arguments(model_a, x)
    names = [name for name, _ in select_modules(model_a, select)]
    cap_a, out_a = _run(model_a, names, x, None)
    cap_b, out_b = _run(model_b, names, x, autocast)
    notes = _notes(model_a, model_b, autocast)
    compiled = [m for m in (model_a, model_b) if is_compiled(m)]
    if compiled:  # the captured runs were eager: the compiled code's own output, from a run without hooks
        out_a, out_b = (_plain(m, x, autocast if m is model_b else None) if is_compiled(m) else o
                        for m, o in ((model_a, out_a), (model_b, out_b)))  # fmt: skip
        warnings.warn(notes[-1], CaptureWarning, stacklevel=2)
    pairs = list(_pairs(cap_a, cap_b, names)) + _output_pairs(out_a, out_b)
    return Divergence(tuple(compared(name, a, b) for name, a, b in pairs), tuple(notes))


def _check_pair(model_a: nn.Module, model_b: nn.Module) -> None:
    modules_a, modules_b = dict(named_modules(model_a)), dict(named_modules(model_b))
    only_a, only_b = _extra(modules_a, modules_b), _extra(modules_b, modules_a)
    if only_a or only_b:
        raise MismatchError(
            f"the models' modules do not match by name: only in A {_few(only_a)}; only in B {_few(only_b)}; "
            "compare two models of the same architecture (a copy, a checkpoint)"
        )


def _extra(mine: dict[str, nn.Module], other: dict[str, nn.Module]) -> list[str]:
    """Names only in ``mine``, less those under a module that is a leaf in ``other`` (a quantized Linear's
    ``_packed_params``: the same layer, built of parts)."""
    leaves = {n for n, m in other.items() if next(m.children(), None) is None}
    parts = {n: n.split(".") for n in mine if n not in other}
    return [n for n, p in parts.items() if not any(".".join(p[:i]) in leaves for i in range(1, len(p)))]


def _few(names: list[str]) -> str:
    if not names:
        return "none"
    shown = ", ".join(repr(n) for n in names[:SHOWN])
    return f"{len(names)} ({shown}{', ...' if len(names) > SHOWN else ''})"


def _arguments(model: nn.Module, x: Any) -> Any:
    """``x`` as ``_feed`` gives it to the model: a tuple ``model.forward`` takes is its positional arguments;
    one it cannot take is read the old way, ``(inputs, ...)``, its first item (with a warning)."""
    if not isinstance(x, tuple):
        return x
    try:
        inspect.signature(unwrap(model).forward).bind(*x)
    except TypeError:
        warn_renamed("divergence(x=(inputs, ...)) feeding only the first item", "x=inputs (a tuple is model(*x))",
                     stacklevel=3)  # fmt: skip
        return x[0]
    return _Positional(x)


class _Positional(tuple):  # type: ignore[type-arg]
    """A tuple of positional arguments, told apart from a loader's ``(inputs, ...)`` batch."""


def _feed(model: nn.Module, x: Any) -> Any:
    if isinstance(x, _Positional):
        device = model_device(model)
        return model(*(a.to(device) if isinstance(a, Tensor) else a for a in x))
    return default_forward(model_device(model))(model, x)


def _run(model: nn.Module, names: list[str], x: Any, autocast: torch.dtype | None) -> tuple[Capture, Any]:
    with evaluating(unwrap(model), "hookscope.compare.divergence", wrappers=1), warnings.catch_warnings():
        warnings.simplefilter("ignore", CompiledWarning)  # said once, by divergence
        with torch.no_grad(), capture(model, names) as cap, _autocast(model, autocast):
            out = _feed(model, x)
    return cap, out


def _plain(model: nn.Module, x: Any, autocast: torch.dtype | None) -> Any:
    with evaluating(unwrap(model)), torch.no_grad(), _autocast(model, autocast):
        return _feed(model, x)


def _autocast(model: nn.Module, dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=model_device(model).type, dtype=dtype)


def _notes(model_a: nn.Module, model_b: nn.Module, autocast: torch.dtype | None) -> list[str]:
    notes = [f"B ran under torch.autocast({str(autocast).removeprefix('torch.')})"] if autocast is not None else []
    which = [side for side, m in (("A", model_a), ("B", model_b)) if is_compiled(m)]
    if which:
        sides = " and ".join(which)
        notes.append(
            f"hookscope.compare: {sides} compiled; hooks need eager running, so the sites of {sides} hold the "
            f"eager model's values; the {OUTPUT} row is the compiled run's"
        )
    return notes


def _pairs(cap_a: Capture, cap_b: Capture, names: list[str]) -> Iterator[tuple[str, Tensor, Tensor]]:
    """(unit, A's tensor, B's tensor) of every call and key, in A's forward order; a mismatch raises."""
    wrong: list[str] = []
    units: list[tuple[int, str, Tensor, Tensor]] = []
    for record in forward_order({n: cap_a[n] for n in names}):
        calls_b = cap_b[record.name].calls
        if len(calls_b) != len(record.calls):
            wrong.append(f"{record.name!r} ran {len(record.calls)} times in A, {len(calls_b)} in B")
            continue
        for call_a, call_b in zip(record.calls, calls_b, strict=True):
            units += _call_units(record.name, len(record.calls), call_a, call_b, wrong)
    if wrong:
        raise MismatchError(f"the models do not run alike on this input: {'; '.join(wrong[:SHOWN])}"
                         f"{f' (and {len(wrong) - SHOWN} more)' if len(wrong) > SHOWN else ''}")  # fmt: skip
    for _, name, a, b in sorted(units, key=lambda u: u[0]):
        yield name, a, b


def _call_units(
    site: str, calls: int, call_a: Call, call_b: Call, wrong: list[str]
) -> list[tuple[int, str, Tensor, Tensor]]:
    keys_a, keys_b = call_a.keys("output"), call_b.keys("output")
    if keys_a != keys_b:
        wrong.append(f"{site!r} call {call_a.index} returned {keys_a} in A, {keys_b} in B")
        return []
    found = []
    for key in keys_a:
        a, b = call_a.get("output", key), call_b.get("output", key)
        if a.shape != b.shape:
            wrong.append(f"{site!r} call {call_a.index} {key}: {tuple(a.shape)} in A, {tuple(b.shape)} in B")
            continue
        found.append((call_a.order, unit_name(site, call_a.index, calls, key, len(keys_a)), a, b))
    return found


def _output_pairs(out_a: Any, out_b: Any) -> list[tuple[str, Tensor, Tensor]]:
    leaves_a, leaves_b = dict(flatten(out_a)), dict(flatten(out_b))
    if list(leaves_a) != list(leaves_b) or any(leaves_a[k].shape != leaves_b[k].shape for k in leaves_a):
        shapes = [{k: tuple(t.shape) for k, t in leaves.items()} for leaves in (leaves_a, leaves_b)]
        raise MismatchError(f"the models' outputs differ in structure: {shapes[0]} in A, {shapes[1]} in B")
    return [(OUTPUT if len(leaves_a) == 1 else f"{OUTPUT} {k}", leaves_a[k], leaves_b[k]) for k in leaves_a]


def compared(name: str, a: Tensor, b: Tensor) -> Site:
    """The numbers of one site: B against A, in float64 (two copies, the difference made in B's)."""
    a64 = a.detach().reshape(-1).double()
    d64 = b.detach().to(a.device).reshape(-1).double()  # B now, the difference below
    norm_a, norm_b = a64.norm().item(), d64.norm().item()
    dot = torch.dot(a64, d64).item()
    d64.sub_(a64)
    norm_d = d64.norm().item()
    relative = norm_d / norm_a if norm_a > 0 else (math.inf if norm_d > 0 else 0.0)
    cosine = dot / (norm_a * norm_b) if norm_a * norm_b > 0 else math.nan
    if not d64.numel() or not a.dim():
        return Site(name, tuple(a.shape), relative, cosine, float(d64.abs().max()) if d64.numel() else 0.0, ())
    at = int(d64.abs_().argmax())
    where = tuple(int(i) for i in torch.unravel_index(torch.tensor(at), a.shape))
    return Site(name, tuple(a.shape), relative, cosine, float(d64[at]), where)
