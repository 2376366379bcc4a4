"""A stored site's calls, addressed by batch: ``run[site].calls[b]`` is batch ``b`` or an error, never a neighbour.

A store lists its calls in batch order, one place per (batch, call) of the site: with one call per
batch, ``calls[b]`` is batch ``b``. A batch lost with a damaged shard keeps its places
(``arrange``): reading one raises ``DamagedShardError`` naming the batch, the shard and what is
wrong with it, so the batches after it keep their numbers. Iterating or slicing gives the calls
that read (the lost ones were named by the ``StoreWarning`` that left them out), and ``len``
counts every place, lost ones included. A place past the end is ``CallRangeError`` (a ``NotCapturedError``
that is also an ``IndexError``), naming the batches the store holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, SupportsIndex, overload

from ..core.call import Call
from ..errors import DamagedShardError, NotCapturedError
from .index import ranges

Place = tuple[int, int]  # (batch, call within it)


class CallRangeError(NotCapturedError, IndexError):
    """``calls[k]`` past the places a stored site has; the message names the batches it holds."""


@dataclass(frozen=True)
class Lost:
    """A place whose batch was in a damaged shard: which shard, and what is wrong with it."""

    batch: int
    shard: str
    why: str


class StoreCalls(list[Call]):
    """The calls of a stored site, one place per (batch, call); lost places raise (see the module docstring)."""

    def __init__(self, site: str, places: list[Place], held: Mapping[Place, Call], lost: Mapping[int, Lost]) -> None:
        super().__init__(held[p] for p in places if p in held)
        self.site, self.places = site, places
        self._at = [held.get(p) for p in places]  # place -> its call, None where lost
        self._lost = {i: lost[b] for i, (b, _) in enumerate(places) if (b, _) not in held}

    def __len__(self) -> int:
        return len(self.places)

    def __bool__(self) -> bool:
        return bool(self.places)

    def __iter__(self) -> Iterator[Call]:
        return (call for call in self._at if call is not None)

    def __reversed__(self) -> Iterator[Call]:
        return (call for call in reversed(self._at) if call is not None)

    @overload
    def __getitem__(self, k: SupportsIndex) -> Call: ...
    @overload
    def __getitem__(self, k: slice) -> list[Call]: ...
    def __getitem__(self, k: SupportsIndex | slice) -> Call | list[Call]:
        if isinstance(k, slice):  # the calls that read in those places, as iterating gives them
            return [call for call in self._at[k] if call is not None]
        i = k.__index__()
        where = i + len(self) if i < 0 else i
        if not 0 <= where < len(self):
            held = ranges(sorted({b for b, _ in self.places}))
            raise CallRangeError(f"{self.site!r} has {len(self)} stored calls ({held}); calls[{i}] is not one of "
                                 f"them: index 0..{len(self) - 1}, or read a batch with run.batch(b)")  # fmt: skip
        call = self._at[where]
        if call is None:
            lost = self._lost[where]
            raise DamagedShardError(lost.shard, lost.why, f"; batch {lost.batch} (calls[{where}] of {self.site!r}) "
                                    "was in it and is lost, the other batches read as usual (run.batches)")  # fmt: skip
        return call

    def __repr__(self) -> str:
        return f"<{len(self)} calls of {self.site!r}, {len(self._lost)} lost with a damaged shard>"

    def __reduce__(self) -> tuple[Any, ...]:  # a pickled copy (a DataLoader worker) keeps the calls that read
        return (list, (list(self),))


def arrange(site: str, held: Mapping[Place, Call], lost_rows: Iterable[Place], lost: Mapping[int, Lost]) -> StoreCalls:
    """The calls of ``site`` by place: ``held`` (read), the places of lost batches that the index still
    names (``lost_rows``), and one place for a lost batch it names none for (as a site called once
    per batch has). ``call.index`` becomes each call's place."""
    places = set(held) | {p for p in lost_rows if p[0] in lost}
    if held or places:
        places |= {(b, 0) for b in lost if not any(p[0] == b for p in places)}
    ordered = sorted(places)
    for i, place in enumerate(ordered):
        if place in held:
            held[place].index = i
    return StoreCalls(site, ordered, held, lost)
