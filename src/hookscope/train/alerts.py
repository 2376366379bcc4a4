"""When a training run goes wrong: ``Thresholds`` a user can set, and the ``Detector`` that applies them.

Each logged row of a site (``hookscope.store.series.COLUMNS``) is checked against:

=============== ====================================================================================
kind            fires when
=============== ====================================================================================
``non_finite``  a statistic of the site is NaN or infinite (at once)
``vanishing``   its parameter-gradient norm is below ``vanishing`` for ``patience`` logged steps
``exploding``   its parameter-gradient norm is above ``exploding`` for ``patience`` logged steps
``dead``        more than ``dead`` of its units (channels, features) were zero for every sample of
                the last ``dead_window`` logged steps (so at the earliest on the ``dead_window``-th)
``update_ratio`` |Δw| / |w| of the optimizer step is outside ``update_ratio`` (low, high) for
                ``patience`` logged steps
=============== ====================================================================================

The update band is the rule of thumb that an optimizer step should change a layer's weights by
about 1e-3 of their norm (Karpathy, CS231n "Babysitting the learning process"): much less and the
layer does not learn, much more and it is driven by noise or diverges. The default band is a
decade and a half below and two decades above it, (3e-5, 1e-1): adaptive optimizers (Adam) take
steps of about their learning rate on every weight, which on small layers is 1e-2 early in a run.
An alert fires once when its condition starts, and again only after the condition has cleared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from ..errors import OptionError
from ..store.history import Alert

STATISTICS = ("act_mean", "act_std", "act_abs_mean", "grad_output_norm", "grad_norm", "weight_norm", "update_ratio")


@dataclass(frozen=True)
class Thresholds:
    """The bounds of the alerts (see the module docstring); ``watch(thresholds={"dead": 0.9})`` overrides some.

    Attributes:
        vanishing: a parameter gradient's L2 norm below this is vanishing.
        exploding: one above this is exploding.
        patience: logged steps in a row a gradient or update bound must be crossed before it alerts.
        dead: a fraction of dead units above this alerts.
        dead_window: logged steps a unit must stay zero for every sample to count as dead.
        update_ratio: ``(low, high)``: the healthy band of ``|w_after - w_before| / |w_before|``.
    """

    vanishing: float = 1e-7  # parameter-gradient L2 norm below this: vanishing
    exploding: float = 1e3  # above this: exploding
    patience: int = 3  # logged steps in a row before a gradient or update alert fires
    dead: float = 0.5  # fraction of dead units above this: dead
    dead_window: int = 3  # logged steps a unit must stay zero for every sample to count as dead
    update_ratio: tuple[float, float] = (3e-5, 1e-1)  # the healthy band of |Δw| / |w| around ~1e-3


def thresholds_of(given: Thresholds | Mapping[str, Any] | None) -> Thresholds:
    """``None`` (the defaults), a ``Thresholds``, or a mapping of the fields to change."""
    if given is None or isinstance(given, Thresholds):
        return given or Thresholds()
    names = [f.name for f in fields(Thresholds)]
    unknown = [k for k in given if k not in names]
    if unknown:
        raise OptionError(f"thresholds= has no {', '.join(map(repr, unknown))}; it takes {', '.join(names)}")
    chosen = replace(Thresholds(), **given)
    low, high = chosen.update_ratio
    if not 0 <= low < high or chosen.patience < 1 or chosen.dead_window < 1:
        raise OptionError("thresholds: update_ratio must be (low, high) with 0 <= low < high, patience and "
                          f"dead_window at least 1; got {chosen}")  # fmt: skip
    return chosen


class Detector:
    """Checks each logged row against the thresholds and remembers streaks and alerts already raised."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self._streak: dict[tuple[str, str], int] = {}
        self._raised: set[tuple[str, str]] = set()

    def check(self, step: int, site: str, row: Mapping[str, float], measured: set[str]) -> list[Alert]:
        """The alerts that start at ``step`` for ``site``; ``measured``: the columns it has values for."""
        t = self.thresholds
        low, high = t.update_ratio
        bad = [c for c in STATISTICS if c in measured and not math.isfinite(row[c])]
        grad, ratio, dead = row["grad_norm"], row["update_ratio"], row["dead"]
        has_grad = "grad_norm" in measured and math.isfinite(grad)
        has_ratio = "update_ratio" in measured and math.isfinite(ratio)
        cases = [
            ("non_finite", bool(bad), 1, bad[0] if bad else "", row[bad[0]] if bad else 0.0, math.inf,
             f"{', '.join(bad)} not finite" if bad else ""),
            ("vanishing", has_grad and grad < t.vanishing, t.patience, "grad_norm", grad, t.vanishing,
             f"parameter-gradient norm {grad:.3g} < {t.vanishing:g} for {t.patience} logged steps"),
            ("exploding", has_grad and grad > t.exploding, t.patience, "grad_norm", grad, t.exploding,
             f"parameter-gradient norm {grad:.3g} > {t.exploding:g} for {t.patience} logged steps"),
            ("dead", "dead" in measured and dead > t.dead, t.dead_window, "dead", dead, t.dead,
             f"{100 * dead:.0f}% of its units zero for every sample of the last {t.dead_window} logged steps "
             f"(bound {100 * t.dead:.0f}%)"),
            ("update_ratio", has_ratio and not low <= ratio <= high, t.patience, "update_ratio", ratio,
             high if ratio > high else low,
             f"update |dw|/|w| {ratio:.3g} {'above' if ratio > high else 'below'} the band {low:g}..{high:g} "
             f"for {t.patience} logged steps"),
        ]  # fmt: skip
        return [a for case in cases if (a := self._one(step, site, *case)) is not None]

    def _one(self, step: int, site: str, kind: str, on: bool, patience: int, *numbers: Any) -> Alert | None:
        key = (site, kind)
        if not on:
            self._streak.pop(key, None)
            self._raised.discard(key)
            return None
        self._streak[key] = self._streak.get(key, 0) + 1
        if self._streak[key] < patience or key in self._raised:
            return None
        self._raised.add(key)
        column, value, bound, message = numbers
        return Alert(step, site, kind, column, float(value), float(bound), message)
