"""How much gradient reached each site of a capture: ``gradient_flow`` and its result, ``GradientFlow``.

``grad_output`` / ``grad_input``: every key of every call, pooled element by element, in float64;
``param_grad``: the latest backward pass's gradient of each of the site's parameters. NaN and Inf
gradients are not filtered: they show up in the row, as they should. The table and the chart are
drawn by ``hookscope.report.tables`` and ``hookscope.viz.charts``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

import torch
from torch import Tensor

from ..base.display import Shows, plot_of, table_of
from ..core.kinds import Kind, gradient_kinds, is_gradient, per_call
from ..core.records import Record, forward_order
from ..errors import OptionError

if TYPE_CHECKING:
    from PIL.Image import Image


@dataclass(frozen=True)
class FlowRow:
    """The gradient magnitude that reached one site (``count`` elements, all calls and keys)."""

    name: str
    mean_abs: float
    max_abs: float
    count: int


class GradientFlow(Sequence[FlowRow], Shows):
    """What ``gradient_flow`` found: a sequence of ``FlowRow`` (``.rows``), in forward order, of one ``kind``.

    Indexing and iterating give the rows, as the list it used to be; ``table()`` is text and
    ``plot()`` the chart of ``gradient_flow_plot``.

    Args:
        rows: one ``FlowRow`` per site (name, mean ``|grad|``, max ``|grad|``, elements), in forward order.
        kind: the gradient kind the rows measure (``grad_output``, ``grad_input`` or ``param_grad``).
    """

    def __init__(self, rows: Iterable[FlowRow], kind: Kind = "grad_output") -> None:
        self.rows: tuple[FlowRow, ...] = tuple(rows)
        self.kind = kind

    @overload
    def __getitem__(self, index: int) -> FlowRow: ...
    @overload
    def __getitem__(self, index: slice) -> list[FlowRow]: ...
    def __getitem__(self, index: int | slice) -> FlowRow | list[FlowRow]:
        return list(self.rows[index]) if isinstance(index, slice) else self.rows[index]

    def __iter__(self) -> Iterator[FlowRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GradientFlow):
            return self.rows == other.rows and self.kind == other.kind
        return isinstance(other, (list, tuple)) and list(self.rows) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<GradientFlow of {self.kind} at {len(self.rows)} sites>"

    def table(self) -> str:
        """A row per site: mean and max ``|gradient|`` and the elements pooled, as text.

        Returns:
            The table, as text.
        """
        return table_of(self)

    def plot(self, *, vanish: float = 1e-6, explode: float = 1e3) -> Image:
        """The chart of ``gradient_flow_plot``: mean and max ``|gradient|`` per site, log scale, both thresholds.

        Args:
            vanish: mean ``|gradient|`` below this is drawn as vanishing (orange).
            explode: max ``|gradient|`` above this is drawn as exploding (red).

        Returns:
            A PIL image of the chart.

        Raises:
            OptionError: the thresholds do not satisfy ``0 < vanish < explode``, or there are no rows.
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        image: Image = plot_of(self, vanish=vanish, explode=explode)
        return image


def gradient_flow(capture: Mapping[str, Record], *, kind: Kind = "grad_output") -> GradientFlow:
    """Mean and max ``|gradient|`` of ``kind`` at every site that holds some, in forward order (a ``GradientFlow``).

    ``grad_output`` / ``grad_input``: every key of every call, pooled element by element.
    ``param_grad``: the latest backward pass's gradient of each of the site's parameters.
    NaN and Inf gradients are not filtered: they show up in the row, as they should.

    Args:
        capture: a capture (any mapping of site name to ``Record``) that ran a backward pass.
        kind: the gradient kind measured: ``grad_output`` (the default), ``grad_input`` or ``param_grad``.

    Returns:
        A ``GradientFlow``, one row per site that holds gradients, in forward order.

    Raises:
        OptionError: ``kind`` is not a gradient kind.
    """
    if not is_gradient(kind):
        raise OptionError(f"gradient_flow needs a gradient kind ({', '.join(gradient_kinds())}), got {kind!r}")
    rows = []
    for record in forward_order(capture):
        grads = [g for g in _gradients(record, kind) if g.numel()]
        if grads:
            rows.append(_flow_row(record.name, grads))
    return GradientFlow(rows, kind)


def _gradients(record: Record, kind: Kind) -> list[Tensor]:
    if not per_call(kind):  # param_grad: held per site
        return [grads[-1] for grads in record.param_grads.values() if grads]
    return [t for call in record.calls for t in call.tensors.get(kind, {}).values()]


def _flow_row(name: str, grads: Iterable[Tensor]) -> FlowRow:
    magnitudes = [g.detach().abs().to(torch.float64) for g in grads]
    count = sum(m.numel() for m in magnitudes)
    total = sum(float(m.sum()) for m in magnitudes)
    return FlowRow(name, total / count, max(float(m.max()) for m in magnitudes), count)
