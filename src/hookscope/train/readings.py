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

Two readings are taken without reducing (``sync="call"``): ``finite(t)``, a tensor the caller
proved finite (the output of a module that keeps finite values finite, fed finite inputs), and
``later(t)``, a gradient held until a judge needs its level (``settle``) or its call no longer
does (``release``, which drops it unread).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core.inference import INFERENCE, version
from ..core.placement import local
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
    held: Tensor | None = None  # taken later: the tensor, until ``settle`` or ``release``

    def resolve(self, low: float, high: float) -> None:
        self.low, self.high, self.extremes = low, high, None
        self.level = finite.level(low, high)

    def settle(self) -> None:
        """Take a reading that was held for later, now (a no-op for any other reading)."""
        tensor, self.held = self.held, None
        if tensor is not None:
            self.level = _now(tensor, self)

    def release(self) -> bool:
        """Drop a reading held for later, unread; True if it was one."""
        dropped, self.held = self.held is not None, None
        if dropped:
            self.version = -1  # never looked up again: a new reading is taken if the tensor comes back
        return dropped

    def absmax(self) -> float | None:
        """max |x|: from the extremes, or (a reading taken with a sum) from the tensor if it is unchanged."""
        if not math.isnan(self.low):
            return finite.absmax(self.low, self.high)
        tensor = self.ref()
        if self.level != finite.FINITE or tensor is None or version(tensor) != self.version:
            return None if self.level == finite.FINITE else math.nan
        low, high = finite.extremes(tensor).tolist()
        return finite.absmax(low, high)


SUMMED = (torch.float32, torch.float64)  # a sum cannot overflow from their usual values


def _now(tensor: Tensor, reading: Reading) -> int:
    """Read ``tensor`` into ``reading`` at once (a sum first where it can be); its level."""
    if tensor.dtype in SUMMED and math.isfinite(local(tensor).sum().item()):
        return finite.FINITE  # finite: the common case, from the cheapest reduction
    low, high = finite.extremes(tensor).tolist()
    reading.resolve(low, high)
    return reading.level


class Readings:
    """The readings of one guard (see the module docstring)."""

    def __init__(self, sync: str) -> None:
        self.sync = sync
        self._known: dict[int, Reading] = {}
        self._unread: list[Reading] = []

    def of(self, tensor: Tensor) -> Reading:
        """The reading of ``tensor`` as it is now: an earlier one if it is unchanged, else a new one."""
        known = self._known.get(id(tensor))
        now = version(tensor)  # an inference tensor tells no change: read it again
        if known is not None and known.ref() is tensor and known.version == now != INFERENCE:
            known.settle()
            return known
        if self.sync == "call":
            reading = self._new(tensor)
            reading.level = _now(tensor, reading)
            return reading
        reading = self._new(tensor, finite.extremes(tensor))
        self._unread.append(reading)
        return reading

    def finite(self, tensor: Tensor) -> Reading:
        """The reading of a tensor the caller proved finite, taken without reducing it."""
        reading = self._new(tensor)
        reading.level = finite.FINITE
        return reading

    def later(self, tensor: Tensor) -> Reading:
        """A reading of ``tensor`` taken only when ``settle`` is called (``sync="call"``; else at once)."""
        if self.sync != "call":
            return self.of(tensor)
        reading = self._new(tensor)
        reading.held = tensor
        return reading

    def _new(self, tensor: Tensor, extremes: Tensor | None = None) -> Reading:
        reading = Reading(extremes, weakref.ref(tensor), version(tensor), tensor.dtype)
        self._known[id(tensor)] = reading
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
