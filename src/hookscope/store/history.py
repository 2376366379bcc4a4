"""One site's rows of a training run: ``History`` (a float64 table, a row per logged step), its ``COLUMNS``, ``Alert``.

``hookscope.watch`` logs a row of ``COLUMNS`` per site and step, and an ``Alert`` when a statistic
crosses its bound; ``hookscope.store.series`` writes and reads them in a watch store. A value that was
not measured (a module without parameters has no weight norm) is NaN; so is one that is undefined (the
update ratio |dw| / |w| of weights whose norm was zero before the step: a zero-initialised layer, PEFT's
``lora_B``), which ``History.undefined`` names and tables print as ``undefined``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor

from ..base import display
from ..base.words import closest
from ..errors import NotCapturedError

if TYPE_CHECKING:
    from PIL.Image import Image

COLUMNS = (
    "step",
    "act_mean",  # mean of the module's output over every call of the step
    "act_std",
    "act_abs_mean",  # mean |x|
    "zeros",  # fraction of output values that are exactly 0
    "dead",  # fraction of units (channels, features) zero for every sample over the dead window
    "grad_output_norm",  # L2 norm of d loss / d output over every call of the step
    "grad_norm",  # L2 norm of the module's parameter gradients, as the optimizer sees them
    "weight_norm",  # L2 norm of its parameters after the step
    "update_ratio",  # |w_after - w_before| / |w_before| over the optimizer step
)


@dataclass(frozen=True)
class Alert:
    """Something going wrong at one module: ``kind`` (vanishing, exploding, dead, update_ratio, non_finite).

    Attributes:
        step: the optimizer step at which the bound was crossed.
        module: the watched module's dotted name.
        kind: ``vanishing``, ``exploding``, ``dead``, ``update_ratio`` or ``non_finite``.
        column: the statistic (a ``History`` column) that crossed its bound.
        value: its value at ``step``.
        bound: the threshold it crossed (``hookscope.Thresholds``).
        message: the alert in words, with what to try.
    """

    step: int
    module: str
    kind: str
    column: str  # the statistic that crossed its bound
    value: float
    bound: float
    message: str

    def __str__(self) -> str:
        return f"step {self.step}: {self.kind} at {self.module!r}: {self.message}"


class History(display.Shows):
    """One site's statistics over the logged steps: ``h["grad_norm"]`` is a list, a float per logged step.

    Args:
        name: the watched module's dotted name.
        type: its class name.
        rows: a float64 tensor ``(steps, len(COLUMNS))``, a row per logged step (``step``,
            ``act_mean``, ``act_std``, ``act_abs_mean``, ``zeros``, ``dead``, ``grad_output_norm``,
            ``grad_norm``, ``weight_norm``, ``update_ratio``).
        undefined: column -> the steps at which its value (NaN in ``rows``) is undefined rather than not
            measured (``update_ratio`` over weights of norm zero); None for none.
    """

    def __init__(
        self, name: str, type: str, rows: Tensor, undefined: Mapping[str, Sequence[int]] | None = None
    ) -> None:
        self.name, self.type = name, type
        self.rows = rows  # (steps, len(COLUMNS)) float64
        self.columns = COLUMNS
        self.undefined = {c: [int(s) for s in steps] for c, steps in (undefined or {}).items() if steps}

    def cell(self, column: str, step: int, value: float) -> str:
        """``value`` of ``column`` at ``step`` as a table shows it: ``undefined``, ``–`` (NaN) or a number.

        Args:
            column: a column of the history.
            step: the logged step of the value.
            value: the value (``self[column]`` at that step).

        Returns:
            The text of the cell.
        """
        if step in self.undefined.get(column, ()):
            return "undefined"
        return "–" if math.isnan(value) else f"{value:.4g}"

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __getitem__(self, column: str) -> list[float]:
        if column not in COLUMNS:
            raise NotCapturedError(
                f"{column!r} is not a column of a history{closest(str(column), COLUMNS)}; "
                f"the columns are {', '.join(COLUMNS)}"
            )
        values: list[float] = self.rows[:, COLUMNS.index(column)].tolist()
        return values

    @property
    def steps(self) -> list[int]:
        return [int(s) for s in self["step"]]

    def row(self, step: int) -> dict[str, float]:
        """The statistics logged at ``step``, by column.

        Args:
            step: a logged optimizer step (one of ``h.steps``).

        Returns:
            Column name -> value at that step.

        Raises:
            NotCapturedError: ``step`` was not logged; the message names the nearest logged step.
        """
        if step not in self.steps:
            raise NotCapturedError(
                f"step {step!r} was not logged for {self.name!r} (logged: {step_span(self.steps)}"
                f"{nearest_steps(step, self.steps)}); pass one of h.steps"
            )
        values: list[float] = self.rows[self.steps.index(step)].tolist()
        return dict(zip(COLUMNS, values, strict=True))

    def last(self) -> dict[str, float]:
        """The newest row (empty when nothing was logged).

        Returns:
            Column name -> value at the last logged step.
        """
        return self.row(self.steps[-1]) if len(self) else {}

    def table(self, *, columns: Sequence[str] | None = None) -> str:
        """A row per logged step of ``columns`` (default: the usual statistics that were measured), as text.

        Args:
            columns: the columns shown; None shows the usual statistics that were measured.

        Returns:
            The table, as text.
        """
        return display.table_of(self, columns=columns)

    def plot(self, *, column: str = "grad_norm", log: bool | None = None) -> Image:
        """``column`` over the logged steps (the training report's chart, one line), as a PIL image.

        Args:
            column: the statistic drawn (default ``grad_norm``).
            log: a log scale for the values; None decides from the column and its range.

        Returns:
            A PIL image of the chart.

        Raises:
            NotCapturedError: ``column`` is not a column of a history.
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        image: Image = display.plot_of(self, column=column, log=log)
        return image

    def __repr__(self) -> str:
        return f"<History {self.name!r} ({self.type}): {len(self)} logged steps, {step_span(self.steps)}>"


def step_span(steps: Sequence[int]) -> str:
    """``"steps 10..50"``: the first and last of ``steps`` (``"step 10"`` for one, ``"none"`` for none).

    Args:
        steps: logged steps, in order.

    Returns:
        The span in words.
    """
    if not steps:
        return "none"
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}..{steps[-1]}"


def nearest_steps(step: object, steps: Sequence[int]) -> str:
    """``"; nearest: 10, 20"``: the logged steps either side of ``step`` (``""`` for none, or a non-number).

    Args:
        step: the step asked for.
        steps: the logged steps, in order.

    Returns:
        The text, ready to append to a message.
    """
    if not steps or isinstance(step, bool) or not isinstance(step, (int, float)):
        return ""
    below = [s for s in steps if s < step][-1:]
    above = [s for s in steps if s > step][:1]
    return f"; nearest: {', '.join(map(str, below + above))}"
