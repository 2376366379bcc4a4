"""A number per module to colour the graph by, from whatever hookscope measured, and the colour scale.

::

    graph.colored(overlay_of(cap, column="std")[0])           # a capture: a statistic of each output
    values, column = overlay_of(w.alerts)                      # a watch's alerts: how many per module
    values, column = overlay_of(sweep)                         # a patch sweep: the fraction restored
    divergence(cap_a, cap_b)                                   # two models on one input: relative change

``overlay_of`` reads: a mapping of numbers; a mapping of ``Summary`` (any field: ``column=``), of
``Record`` (a capture: ``summarize`` of each first call's output, ``mean_abs`` by default) or of
``History`` (a watch run: the last logged value of a column, ``grad_norm`` by default); a
``GradientFlow`` (mean |gradient|); a list of ``Alert`` (count per module); a ``NonFiniteError``
(1 at the module that produced the first NaN or Inf); a patch sweep (``restored``: the largest
fraction over positions); an edit report (``rows``: the largest relative change per site). It
returns the numbers and what they are, which the legend names.

Colours run from the smallest finite value (dark blue) to the largest (yellow) through a viridis
scale, linear or, with ``log`` (the default when the values span more than a decade, all
positive), logarithmic. A non-finite value is drawn red, a module without a value white.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..base.deprecation import renamed
from ..core.records import Record
from ..errors import InputError, NonFiniteError, OptionError
from ..stats.gradient_flow import GradientFlow
from ..stats.summary import Summary, summarize
from ..store.history import Alert, History

VIRIDIS = ("#440154", "#414487", "#2a788e", "#22a884", "#7ad151", "#fde725")  # 0 -> 1
NON_FINITE = "#d62728"
NO_VALUE = "#ffffff"


@renamed(measure="column")  # measure= is compare.cka's CKA or RSA
def overlay_of(source: Any, *, column: str | None = None) -> tuple[dict[str, float], str]:
    """``(module name -> number, what the numbers are)`` from a result hookscope made (see the module)."""
    if isinstance(source, NonFiniteError):
        return {source.module: 1.0}, f"first non-finite value ({source.value}, {source.phase})"
    if isinstance(source, GradientFlow):
        return {row.name: row.mean_abs for row in source}, f"mean |{source.kind}|"
    if hasattr(source, "restored") and hasattr(source, "metric_clean"):  # edits.effects.PatchSweep
        return {site: _largest(v) for site, v in source.restored.items()}, "fraction restored"
    if hasattr(source, "rows") and all(hasattr(r, "relative") for r in source.rows):  # edits.tally.EditReport
        return _most((r.site, r.relative) for r in source.rows), "relative change"
    if isinstance(source, Sequence) and all(isinstance(a, Alert) for a in source):
        return {k: float(v) for k, v in Counter(a.module for a in source).items()}, "alerts"
    if isinstance(source, Mapping):
        return _from_mapping(source, column)
    raise InputError(
        f"an overlay is a mapping of numbers, summaries, records or histories, a GradientFlow, a list of alerts, "
        f"a NonFiniteError, a patch sweep or an edit report; got {type(source).__name__}"
    )


def _from_mapping(source: Mapping[str, Any], column: str | None) -> tuple[dict[str, float], str]:
    values = list(source.values())
    if all(isinstance(v, Record) for v in values):
        stat = column or "mean_abs"
        found = {k: _stat(summarize(r.calls[0].tensors["output"][r.calls[0].keys("output")[0]]), stat)
                 for k, r in source.items() if r.calls and r.calls[0].keys("output")}  # fmt: skip
        return found, f"{stat} of the output"
    if all(isinstance(v, Summary) for v in values):
        stat = column or "mean_abs"
        return {k: _stat(v, stat) for k, v in source.items()}, stat
    if all(isinstance(v, History) for v in values):
        name = column or "grad_norm"
        return {k: v[name][-1] for k, v in source.items() if len(v)}, f"{name} (last logged step)"
    if all(isinstance(v, int | float) for v in values):
        return {str(k): float(v) for k, v in source.items()}, column or "value"
    raise InputError(
        "an overlay mapping holds numbers, Summary, Record or History values, one kind; "
        f"got {sorted({type(v).__name__ for v in values})}; pass module name -> float"
    )


def _stat(summary: Summary, stat: str) -> float:
    value = summary.as_dict().get(stat)
    if not isinstance(value, int | float):
        raise OptionError(f"column={stat!r} is not a number of a Summary; pass mean, std, min, max, mean_abs, ...")
    return float(value)


def _largest(value: float | list[float]) -> float:
    return max(value) if isinstance(value, list) else float(value)


def _most(pairs: Any) -> dict[str, float]:
    found: dict[str, float] = {}
    for site, value in pairs:
        found[site] = max(found.get(site, -math.inf), float(value))
    return found


def divergence(first: Mapping[str, Record], second: Mapping[str, Record]) -> dict[str, float]:
    """``|b - a| / |a|`` (L2) of each site's first output in two captures of one input (two models, a model
    and its edit): where they part. Sites in only one capture, or of different shapes, are left out."""
    found = {}
    for name, record in first.items():
        other = second.get(name)
        if other is None or not record.calls or not other.calls:
            continue
        a, b = (r.calls[0].tensors.get("output", {}) for r in (record, other))
        key = next((k for k in a if k in b and a[k].shape == b[k].shape), None)
        if key is not None:
            left, right = a[key].double(), b[key].double()
            found[name] = float((right - left).norm() / left.norm().clamp_min(1e-300))
    return found


def scale(values: Mapping[str, float], *, log: bool | None = None) -> tuple[float, float, bool]:
    """``(lo, hi, log)`` over the finite values; ``log`` None: on when all are positive over more than a decade."""
    finite = [v for v in values.values() if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0, False
    lo, hi = min(finite), max(finite)
    if log is None:
        log = lo > 0 and hi / lo > 10
    return lo, hi, bool(log and lo > 0)


def color(value: float | None, lo: float, hi: float, log: bool = False) -> str:
    """The fill of a box: viridis from ``lo`` to ``hi``; red when non-finite, white for None."""
    if value is None:
        return NO_VALUE
    if not math.isfinite(value):
        return NON_FINITE
    if log:
        value, lo, hi = (math.log10(max(v, 1e-300)) for v in (value, lo, hi))
    at = 0.5 if hi <= lo else min(1.0, max(0.0, (value - lo) / (hi - lo)))
    return _mix(at)


def _mix(at: float) -> str:
    """Viridis at ``at`` in [0, 1], linearly between its stops."""
    position = at * (len(VIRIDIS) - 1)
    i = min(int(position), len(VIRIDIS) - 2)
    left, right = (_rgb(VIRIDIS[j]) for j in (i, i + 1))
    mixed = (round(a + (b - a) * (position - i)) for a, b in zip(left, right, strict=True))
    return "#" + "".join(f"{c:02x}" for c in mixed)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


def ink(fill: str) -> str:
    """Black or white text, whichever reads on ``fill``."""
    r, g, b = _rgb(fill)
    return "#111111" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#ffffff"
