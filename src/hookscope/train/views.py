"""Notebook views of a training run: a ``History`` and a ``Watch`` show themselves as a table with sparklines.

``History`` (one module's rows) shows a row per statistic: its last value and a sparkline over the
logged steps. A ``Watch`` (registered in ``hookscope.train.watch``) shows its alerts, then a row per
module: last gradient norm, update ratio and dead fraction, and a sparkline of the gradient norm.
Made of ``hookscope.viz.fragments``'s pieces: escaped, inline, no script, nothing fetched.

``.table()`` and ``.plot()`` of both are here too: a ``History``'s table is a row per logged
step, a ``Watch``'s a row per module (its last logged row); their plot is the training report's
chart of one statistic over the steps, a line per module.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..base import display
from ..base.optional import require
from ..base.words import columns as text_columns
from ..errors import OptionError
from ..store.history import COLUMNS, Alert, History
from ..viz.curves import curves_png, sparkline_png
from ..viz.fragments import MAX_ROWS, Safe, escape, image_tag, more, note, table, view
from .sites import shown

if TYPE_CHECKING:
    from PIL.Image import Image

SHOWN = ("grad_norm", "update_ratio", "dead", "zeros", "act_mean", "act_std", "grad_output_norm", "weight_norm")
LOG = {"grad_norm", "update_ratio", "grad_output_norm", "weight_norm"}
LAST = ("grad_norm", "update_ratio", "dead", "act_std")  # a watch's table: each module's last row
FROZEN = ("grad_norm", "update_ratio")  # what a site whose parameters are all frozen has no value of


def history_table(history: History, *, columns: Sequence[str] | None = None) -> str:
    """A row per logged step: ``columns`` (default: those of ``SHOWN`` with a finite or undefined value), NaN as
    ``–``, an undefined value (``History.undefined``) as ``undefined``."""
    shown = list(columns) if columns is not None else [c for c in SHOWN if any(map(math.isfinite, history[c]))
                                                       or c in history.undefined]  # fmt: skip
    wrong = [c for c in shown if c not in COLUMNS]
    if wrong:
        raise OptionError(f"columns= takes columns of a history ({', '.join(COLUMNS)}), got {', '.join(wrong)}")
    values = [history[c] for c in shown]
    rows = [["step", *shown]] + [[str(step), *(history.cell(c, step, v[i]) for c, v in zip(shown, values, strict=True))]
                                 for i, step in enumerate(history.steps)]  # fmt: skip
    return "\n".join(text_columns(rows, right=range(len(shown) + 1)))


def histories_table(histories: Mapping[str, History], *, frozen: Sequence[str] = ()) -> str:
    """A row per module: its type, steps logged, and its last logged row (``LAST``); the gradient norm and
    update ratio of the ``frozen`` sites (every parameter frozen) as ``frozen``."""
    rows = [["module", "type", "logged", "step", *LAST]]
    for name, h in histories.items():
        last = h.last()
        step = str(int(last["step"])) if last else "–"
        cells = ["frozen" if name in frozen and c in FROZEN else _last_cell(h, c) for c in LAST]
        rows.append([shown(name), h.type, str(len(h)), step, *cells])
    return "\n".join(text_columns(rows, right=range(2, len(rows[0]))))


def history_plot(history: History, *, column: str = "grad_norm", log: bool | None = None) -> Image:
    """``column`` of ``history`` over its logged steps (see ``series_plot``)."""
    return series_plot({history.name: history}, column=column, log=log)


def series_plot(histories: Mapping[str, History], *, column: str = "grad_norm", log: bool | None = None) -> Image:
    """``column`` over the logged steps, a line per module (the training report's chart), as a PIL image;
    ``log`` defaults to a log axis for the norms and the update ratio."""
    if column not in COLUMNS or column == "step":
        raise OptionError(f"column= takes a statistic of a history ({', '.join(COLUMNS[1:])}), got {column!r}")
    log = column in LOG if log is None else log
    series = {name: (h.steps, h[column]) for name, h in histories.items()}
    png = curves_png(series, title=f"{column}{' (log)' if log else ''}", log=log)
    pil: Any = require("PIL.Image")
    image: Image = pil.open(io.BytesIO(png)).convert("RGB")
    return image


@display.shows_as(History, table=history_table, plot=history_plot)
def history_html(history: History) -> str:
    """The last value and a sparkline of every statistic of ``history``."""
    rows = []
    for column in SHOWN:
        values = history[column]
        if any(math.isfinite(v) for v in values) or column in history.undefined:
            rows.append((column, _last_cell(history, column), _spark(values, log=column in LOG)))
    body = table(("statistic", "last", "over the steps"), rows, numeric=(1,)) if rows else note("nothing logged yet")
    title = f"History of {history.name!r} ({history.type}): {len(history)} logged steps"
    return view(body, title=title)


def watch_html(histories: Mapping[str, History], alerts: Sequence[Alert], *, steps: int, every: int) -> str:
    """The alerts and a row per watched module (see the module docstring)."""
    listed = "".join(f"<li>{escape(str(a))}</li>" for a in alerts[:10])
    head = Safe(f'<ul class="hs-note">{listed}</ul>') if alerts else note("no alert")
    rows = [
        (shown(h.name), h.type, _last_cell(h, "grad_norm"), _last_cell(h, "update_ratio"),
         _last_cell(h, "dead"), _spark(h["grad_norm"], log=True) if len(h) else "")
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


def _last_cell(history: History, column: str) -> str:
    """The last value of ``column``: ``undefined`` (``History.undefined``), ``–`` (NaN) or a number."""
    return history.cell(column, history.steps[-1], _last(history, column)) if len(history) else "–"
