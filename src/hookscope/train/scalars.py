"""Scalars logged beside a watch's statistics: ``w.log(loss=loss, lr=lr)`` -> ``Scalars``.

::

    scalars = Scalars()
    scalars.add(7, loss=loss_tensor, lr=1e-3)   # held as given: a tensor is not read yet
    scalars.settle()                            # every held tensor to the host in one transfer
    scalars.series["loss"]                      # [(7, 0.413)], (step, value) in the order logged

A tensor is held (detached) until ``settle``, which the watch calls when a logged step ends and
when its block ends, so a loop that logs its loss every step pays one host transfer per logged
step, not one per call. A value is a Python number or a tensor of one element; anything else is an
``OptionError`` when it is logged.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import torch
from torch import Tensor

from ..errors import OptionError

Pending = tuple[int, str, Tensor | float]


class Scalars:
    """Named scalars per step: ``add`` holds them, ``settle`` brings held tensors to the host."""

    def __init__(self) -> None:
        self.series: dict[str, list[tuple[int, float]]] = {}
        self._pending: list[Pending] = []

    def add(self, step: int, **values: object) -> None:
        """Hold ``values`` for ``step`` (numbers as they are, tensors detached, not read)."""
        for name, value in values.items():
            self._pending.append((step, name, _checked(name, value)))

    def settle(self) -> dict[int, dict[str, float]]:
        """Every held value on the host, added to ``series``; returns them by step (what was new)."""
        pending, self._pending = self._pending, []
        tensors = [v for _, _, v in pending if isinstance(v, Tensor)]
        host = iter(_to_host(tensors))
        new: dict[int, dict[str, float]] = {}
        for step, name, value in pending:
            number = next(host) if isinstance(value, Tensor) else float(value)
            self.series.setdefault(name, []).append((step, number))
            new.setdefault(step, {})[name] = number
        return dict(sorted(new.items()))

    def rows(self) -> dict[str, Tensor]:
        """``{name: (n, 2) float64 tensor of (step, value)}``, what the store writes."""
        return {name: torch.tensor(pairs, dtype=torch.float64).reshape(-1, 2) for name, pairs in self.series.items()}


def _checked(name: str, value: object) -> Tensor | float:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise OptionError(f"w.log({name}=...) takes a number or a tensor of one element, got a tensor of shape "
                              f"{tuple(value.shape)}; log a reduction such as {name}=t.mean()")  # fmt: skip
        return value.detach().reshape(())
    if isinstance(value, (int, float, numbers.Real)) and not isinstance(value, bool):
        return float(value)
    raise OptionError(f"w.log({name}=...) takes a number or a tensor of one element, got {type(value).__name__}; "
                      f"pass float({name}) or a tensor")  # fmt: skip


def _to_host(tensors: list[Tensor]) -> list[float]:
    """The values of one-element tensors, one transfer per device they are on."""
    out: dict[int, float] = {}
    by_device: dict[torch.device, list[int]] = {}
    for i, t in enumerate(tensors):
        by_device.setdefault(t.device, []).append(i)
    for indices in by_device.values():
        stacked = torch.stack([tensors[i].to(torch.float64) for i in indices])
        out.update(zip(indices, stacked.cpu().tolist(), strict=True))
    return [out[i] for i in range(len(tensors))]


def merged(
    rows: Mapping[int, Mapping[str, float]], more: Mapping[int, Mapping[str, float]]
) -> dict[int, dict[str, float]]:
    """Two ``{step: {name: value}}`` tables as one, steps in order; finite values only (what a tracker takes)."""
    out: dict[int, dict[str, float]] = {}
    for table in (rows, more):
        for step, values in table.items():
            out.setdefault(step, {}).update({k: v for k, v in values.items() if math.isfinite(v)})
    return dict(sorted(out.items()))
