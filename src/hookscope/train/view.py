"""Notebook views of a training run: a ``History`` and a ``Watch`` show themselves as a table with sparklines.

``History`` (one module's rows) shows a row per statistic: its last value and a sparkline over the
logged steps. A ``Watch`` (registered in ``hookscope.train.watch``) shows its alerts, then a row per
module: last gradient norm, update ratio and dead fraction, and a sparkline of the gradient norm.
Made of ``hookscope.viz.html``'s pieces: escaped, inline, no script, nothing fetched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .. import display
from ..store.series import Alert, History
from ..viz.curves import sparkline_png
from ..viz.html import MAX_ROWS, Safe, escape, image_tag, more, note, table, view

SHOWN = ("grad_norm", "update_ratio", "dead", "zeros", "act_mean", "act_std", "grad_output_norm", "weight_norm")
LOG = {"grad_norm", "update_ratio", "grad_output_norm", "weight_norm"}


@display.shows_as(History)
def history_html(history: History) -> str:
    """The last value and a sparkline of every statistic of ``history``."""
    rows = []
    for column in SHOWN:
        values = history[column]
        if any(math.isfinite(v) for v in values):
            rows.append((column, _number(values[-1]), _spark(values, log=column in LOG)))
    body = table(("statistic", "last", "over the steps"), rows, numeric=(1,)) if rows else note("nothing logged yet")
    title = f"History of {history.name!r} ({history.type}): {len(history)} logged steps"
    return view(body, title=title)


def watch_html(histories: Mapping[str, History], alerts: Sequence[Alert], *, steps: int, every: int) -> str:
    """The alerts and a row per watched module (see the module docstring)."""
    listed = "".join(f"<li>{escape(str(a))}</li>" for a in alerts[:10])
    head = Safe(f'<ul class="hs-note">{listed}</ul>') if alerts else note("no alert")
    rows = [
        (h.name, h.type, _number(_last(h, "grad_norm")), _number(_last(h, "update_ratio")),
         _number(_last(h, "dead")), _spark(h["grad_norm"], log=True) if len(h) else "")
        for h in list(histories.values())[:MAX_ROWS]
    ]  # fmt: skip
    body = head + more(min(len(alerts), 10), len(alerts), "alerts")
    body += table(("module", "type", "grad norm", "update ratio", "dead", "grad norm over the steps"), rows,
                  numeric=(2, 3, 4)) + more(len(rows), len(histories), "modules")  # fmt: skip
    return view(body, title=f"Watch: {steps} steps, every {every} logged, {len(alerts)} alerts")


def _spark(values: Sequence[float], *, log: bool) -> Safe | str:
    if not any(math.isfinite(v) and (v > 0 or not log) for v in values):
        return ""
    return image_tag(sparkline_png(values, log=log), alt="over the logged steps", width=160)


def _last(history: History, column: str) -> float:
    return history[column][-1] if len(history) else math.nan


def _number(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.4g}"
