"""The report's gradient-flow chart: data for the page, not a picture.

``flow_chart``: mean and max |grad_output| of every layer that received a gradient
(``stats.gradient_flow``), each bar's end on a log axis of whole decades, and its colour class:
``normal``, ``vanishing`` (below ``VANISH``) or ``exploding`` (above ``EXPLODE``, or NaN). The page
draws it as rows of HTML, so names wrap instead of being cut and the text stays readable at any width.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.records import Record
from ..stats.gradient_flow import FlowRow, gradient_flow

VANISH, EXPLODE = 1e-6, 1e3  # the gradient-flow chart's lines: below VANISH vanishing, above EXPLODE exploding
MAX_TICKS = 5  # labelled decades on the gradient-flow axis


@dataclass(frozen=True)
class FlowBar:
    """One layer of the gradient-flow chart: mean and max |gradient|, where their bars end and their colour."""

    name: str
    mean_abs: float
    max_abs: float
    mean_at: float  # where the mean bar ends, percent of the axis (0: at the floor, or no bar)
    max_at: float
    mean_state: str  # "normal", "vanishing" (below VANISH, zero included) or "exploding" (above EXPLODE, NaN)
    max_state: str


@dataclass(frozen=True)
class FlowChart:
    """The gradient-flow chart of ``grad_output``: one bar pair per layer on a log axis, two threshold lines."""

    bars: tuple[FlowBar, ...]  # every layer that received a gradient, in forward order
    vanish: float
    explode: float
    vanish_at: float  # percent of the axis
    explode_at: float
    decades: int  # the axis spans this many powers of ten
    ticks: tuple[tuple[float, str], ...]  # (percent, "1e-6") for the labelled decades

    @property
    def vanish_label(self) -> str:
        return _short(self.vanish)

    @property
    def explode_label(self) -> str:
        return _short(self.explode)

    def count(self, state: str) -> int:
        """How many layers' mean |gradient| is in ``state``."""
        return sum(bar.mean_state == state for bar in self.bars)

    def named(self, state: str, most: int = 5) -> str:
        """The first ``most`` layers whose mean is in ``state``, comma separated."""
        names = [bar.name or "(model)" for bar in self.bars if bar.mean_state == state]
        return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def flow_chart(sites: Mapping[str, Record]) -> FlowChart | None:
    """The gradient-flow chart of ``grad_output`` at ``sites``; None when no gradient is held."""
    rows = gradient_flow(sites)
    return flow_bars(rows) if rows else None


def flow_bars(rows: Sequence[FlowRow], *, vanish: float = VANISH, explode: float = EXPLODE) -> FlowChart:
    """Bars of ``rows`` on a log axis of whole decades that holds every finite non-zero value and both lines."""
    seen = [v for r in rows for v in (r.mean_abs, r.max_abs) if 0 < v < math.inf]
    high = math.ceil(math.log10(max([*seen, explode])) + 0.5)
    span = high - math.floor(math.log10(min([*seen, vanish])) - 0.5)
    step = math.ceil(span / (MAX_TICKS - 1))  # a label every `step` decades, at both ends of the axis
    low = high - step * math.ceil(span / step)

    def at(value: float) -> float:  # percent of the axis; zero and NaN draw no bar, Inf a full one
        if not value > 0:
            return 0.0
        return 100 * min(max((math.log10(value) - low) / (high - low), 0.0), 1.0)

    def state(value: float) -> str:
        if value < vanish:
            return "vanishing"
        return "exploding" if value > explode or value != value else "normal"

    bars = tuple(
        FlowBar(r.name, r.mean_abs, r.max_abs, at(r.mean_abs), at(r.max_abs), state(r.mean_abs), state(r.max_abs))
        for r in rows
    )
    ticks = tuple((100 * (d - low) / (high - low), _decade(d)) for d in range(low, high + 1, step))
    return FlowChart(bars, vanish, explode, at(vanish), at(explode), high - low, ticks)


def _decade(power: int) -> str:
    return {0: "1", 1: "10", 2: "100"}.get(power, f"1e{power}")


def _short(value: float) -> str:
    """``1e-6``, ``100``, ``2.5e3``: a threshold as the axis labels its decades."""
    mantissa, exponent = f"{value:.2e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return _decade(int(exponent)) if mantissa == "1" else f"{mantissa}e{int(exponent)}"
