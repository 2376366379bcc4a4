"""Readings: the extremes of each tensor the guard sees, taken once, read at once or per pass.

A tensor seen twice while unchanged (a layer's output is the next layer's input; a block returns
its last layer's output; one gradient handed to two calls) is reduced once: readings are kept by
``id`` with a weak reference and the tensor's version, and forgotten at each forward pass.
With ``sync="call"`` each reading is read to the host as it is taken; with ``"pass"`` it stays
on the device until ``read()``, which reads them all with one ``stack`` per device and dtype.

With ``sync="call"`` a float32 or float64 tensor is first summed: a finite sum means a finite
tensor, and a sum reads memory 30% faster than ``aminmax`` on the CPU (4.2 ms against 6.0 ms
for 8x96x112x112 floats, one thread). Only when the sum is not finite (a NaN, an inf, or finite
values whose sum overflows) are the extremes taken, which tell which. A summed reading gives
max |x| later, from the tensor if it is still alive and unchanged. Half precision is never
summed (its sum overflows at 65504), nor are readings that wait on a device (``"pass"``).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch
from torch import Tensor

from . import finite


@dataclass(eq=False)
class Reading:
    """One tensor at one moment: its extremes (resolved to numbers once read) and a weak reference.

    Several checks share a reading when they see the same tensor (a layer's output is the next
    layer's input): it is reduced once.
    """

    extremes: Tensor | None  # [min, max] on the tensor's device until resolved
    ref: weakref.ref[Tensor]
    version: int
    dtype: torch.dtype
    low: float = float("nan")
    high: float = float("nan")
    level: int = finite.NAN

    def resolve(self, low: float, high: float) -> None:
        self.low, self.high, self.extremes = low, high, None
        self.level = finite.level(low, high)

    def absmax(self) -> float | None:
        """max |x|: from the extremes, or (a reading taken with a sum) from the tensor if it is unchanged."""
        if not math.isnan(self.low):
            return finite.absmax(self.low, self.high)
        tensor = self.ref()
        if self.level != finite.FINITE or tensor is None or tensor._version != self.version:
            return None if self.level == finite.FINITE else math.nan
        low, high = finite.extremes(tensor).tolist()
        return finite.absmax(low, high)


SUMMED = (torch.float32, torch.float64)  # a sum cannot overflow from their usual values


class Readings:
    """The readings of one guard (see the module docstring)."""

    def __init__(self, sync: str) -> None:
        self.sync = sync
        self._known: dict[int, tuple[weakref.ref[Tensor], int, Reading]] = {}
        self._unread: list[Reading] = []

    def of(self, tensor: Tensor) -> Reading:
        """The reading of ``tensor`` as it is now: an earlier one if it is unchanged, else a new one."""
        known = self._known.get(id(tensor))
        if known is not None and known[0]() is tensor and known[1] == tensor._version:
            return known[2]
        if self.sync == "call" and tensor.dtype in SUMMED and math.isfinite(tensor.detach().sum().item()):
            reading = Reading(None, weakref.ref(tensor), tensor._version, tensor.dtype, level=finite.FINITE)
            self._known[id(tensor)] = (reading.ref, reading.version, reading)
            return reading  # finite: the common case, from the cheapest reduction
        extremes = finite.extremes(tensor)
        reading = Reading(extremes, weakref.ref(tensor), tensor._version, tensor.dtype)
        if self.sync == "call":
            low, high = extremes.tolist()
            reading.resolve(low, high)
        else:
            self._unread.append(reading)
        self._known[id(tensor)] = (reading.ref, reading.version, reading)
        return reading

    def read(self) -> None:
        """Bring every reading still on a device to the host: one sync per device and dtype."""
        unread, self._unread = self._unread, []
        groups: dict[tuple[torch.device, torch.dtype], list[tuple[Reading, Tensor]]] = {}
        for reading in unread:
            if reading.extremes is not None:
                key = (reading.extremes.device, reading.extremes.dtype)
                groups.setdefault(key, []).append((reading, reading.extremes))
        for group in groups.values():
            values = torch.stack([extremes for _, extremes in group]).tolist()
            for (reading, _), (low, high) in zip(group, values, strict=True):
                reading.resolve(low, high)

    def forget(self) -> None:
        """A new forward pass: tensors seen before are not looked up again (readings not read are kept)."""
        self._known.clear()
