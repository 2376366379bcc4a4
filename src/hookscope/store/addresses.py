"""Where a column's items lie, one number each, and the one gather that reads a minibatch of them.

A column's arrays are views of its mapped shard files (``hookscope.store.columns``). Gathering a
random minibatch array by array (one ``index_select`` per batch it draws from, then an
``index_copy_`` back into draw order) copies every item twice and takes a Python step per batch.
``Addresses`` sees each file instead as one *row view*: row ``a`` of it is the ``width`` elements from
element ``a`` of the file (strides ``(1, 1)``: the rows overlap, nothing is copied), so every item of
every batch in the file is one row of it, and a minibatch drawn from anywhere in one file is one
``index_select``, straight into draw order. An item's *code* is its row in that view, with the view's
number above bit ``SHIFT``. An array that is not aligned to its dtype (a file written elsewhere) is a
source of its own, copied once, as ``Column.array`` reads it. Views are made on first use, in the
process that reads them (a ``DataLoader`` worker maps its own).

Where a column's items lie in several files of one dtype and item shape (a store of several shards),
the files are mapped end to end into one range of addresses (``hookscope.store.mapping``) and are one
source: a code is then a row of that one view, and any minibatch is one ``index_select``. Where that
is not available (not Linux or macOS) or the sources differ, each is its own view, and a minibatch
drawn from several is read from the one most of its items lie in, the others' items put in after.

A minibatch's memory comes back (``Outputs``): fresh memory is pages the kernel must fault in and
zero, which cost as much as the gather itself. The memory of a minibatch handed out before is
written again only when nothing holds it any more: no tensor over it (the minibatch, a view of it,
a NumPy array made from it, autograd's saved tensors) and not shared with another process (a
``DataLoader`` worker's minibatches are moved to shared memory as they are sent).
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..errors import DamagedShardError
from . import mapping
from .columns import Column
from .shards import DTYPES, inside, one_line

KEPT = 8  # the minibatches whose memory may come back: a consumer holding more gets fresh memory
SHIFT = 40  # a code's source number sits above bit 40: a file of up to 2**40 elements
ROW = (1 << SHIFT) - 1


class Addresses:
    """The row views of one column's files, and the codes of its items in them, for the batches given.

    Args:
        column: the column (``hookscope.store.columns.Column``) whose items are read.
        batches: the batches read, in order (``StoreDataset.batches``); a batch's place in it is its slot.
    """

    def __init__(self, column: Column, batches: list[int]) -> None:
        self.column, self.batches = column, batches
        self.numbers: dict[tuple[Any, ...], int] = {}  # ("file", file, dtype, item) or ("array", where, item)
        self.keys: list[tuple[Any, ...]] = []
        self._views: dict[int, Tensor] = {}
        self._outputs = Outputs()
        placed = [self._source(column.places[b][0]) for b in batches]
        for where in (where for b in batches for _, where, _ in column.parts.get(b, ())):
            self._source(where)  # a sequence's calls: every source is known before the files are joined
        self.joined = self._join()  # each file's first element in one view of them all, or None: a view each
        origin = [self._code(n, start) for n, start, _, _ in placed]
        self.origin = torch.tensor(origin, dtype=torch.long)
        self.width = torch.tensor([width for _, _, width, _ in placed], dtype=torch.long)
        self.spans = [(at, width) for at, (_, _, width, _) in zip(origin, placed, strict=True)]  # as ints, for codes
        self.first = torch.tensor([column.places[b][1] for b in batches], dtype=torch.long)
        self.item_bytes = placed[0][3] if placed else 0  # what one item holds
        self.lookup = None  # item -> row in its array, where a batch's padding is left out
        if column.masks:
            self.lookup = torch.cat([self._rows(b) for b in batches])
        self.table: Tensor | None = None  # item -> its code, where a batch's items lie in several arrays (its calls)
        if column.parts:
            self.table = torch.cat([self._spread(b) for b in batches]) if batches else torch.empty(0, dtype=torch.long)
            counts = torch.tensor([0] + [column.places[b][2] for b in batches], dtype=torch.long)
            self.bounds = counts.cumsum(0)

    def codes(self, slot: int) -> Tensor:
        """The codes of every item of the batch at ``slot``, in item order.

        Args:
            slot: the batch's place in ``batches``.

        Returns:
            A 1-D long tensor, one code per item.
        """
        if self.table is not None:
            return self.table[self.bounds[slot] : self.bounds[slot + 1]]
        batch, (origin, width) = self.batches[slot], self.spans[slot]
        _, first, count = self.column.places[batch]
        if batch in self.column.masks:
            return self.column.masks[batch] * width + origin
        return torch.arange(origin + first * width, origin + (first + count) * width, width)  # one op, no rows

    def items(self, slot: Tensor, offset: Tensor, index: Tensor) -> Tensor:
        """The codes of items ``index`` (each item ``offset`` of the batch at ``slot``), as long tensors.

        Args:
            slot: each item's batch, by its place in ``batches``.
            offset: each item's place in its batch.
            index: each item's place in the whole column.

        Returns:
            A 1-D long tensor, one code per item.
        """
        if self.table is not None:
            return self.table[index]
        row = self.lookup[index] if self.lookup is not None else self.first[slot] + offset
        return row * self.width[slot] + self.origin[slot]

    def gather(self, codes: Tensor) -> Tensor:
        """The items ``codes`` name, in that order: one ``index_select`` per source they lie in (one source
        where the files are joined).

        The source most of them lie in is read straight into draw order (the places of the others
        reading its row 0), then the others' items are read and put in their places.

        Args:
            codes: a 1-D long tensor of codes (``codes``'s, ``items``').

        Returns:
            ``(len(codes), *item_shape)``, a new tensor in the column's dtype.
        """
        if not self.keys:  # a column without a batch
            return torch.empty(0)
        if len(self.keys) == 1:  # one file, or the files joined: a code is a row
            return self._read(0, codes)
        number, row = codes >> SHIFT, codes & ROW
        low, high = torch.aminmax(number) if len(codes) else (torch.zeros(()), torch.zeros(()))
        if low == high:  # every item in one file: one gather
            return self._read(int(low), row)
        held = torch.bincount(number).tolist()
        most = held.index(max(held))
        others = (number != most).nonzero().squeeze(1)
        found = self._read(most, row.index_fill(0, others, 0))  # the others' places read row 0, then are filled
        for value in (v for v, count in enumerate(held) if count and v != most):
            at = others if len(others) == held[value] else others[number[others] == value]
            theirs = torch.index_select(self._view(value), 0, row[at])
            found.index_copy_(0, at, theirs.reshape(len(at), *found.shape[1:]))
        return found

    def __getstate__(self) -> dict[str, Any]:  # a worker maps the files itself, nothing is copied
        return {**self.__dict__, "_views": {}}

    def _rows(self, batch: int) -> Tensor:
        """The rows of ``batch``'s items in its array: a range, or the mask's rows where padding is left out."""
        _, first, count = self.column.places[batch]
        rows = self.column.masks.get(batch)
        return torch.arange(first, first + count) if rows is None else rows

    def _spread(self, batch: int) -> Tensor:
        """The codes of ``batch``'s items, part after part (``Column.parts``: a sequence's calls)."""
        codes = []
        for _, where, count in self.column.parts.get(batch, [(0, self.column.places[batch][0], 0)]):
            number, start, width, _ = self._source(where)
            rows = torch.arange(count) if batch in self.column.parts else self._rows(batch)
            codes.append(rows * width + self._code(number, start))
        return torch.cat(codes)

    def _code(self, number: int, start: int) -> int:
        """The code of element ``start`` of source ``number`` (as ``_source`` numbers them): its place in the
        joined view, or the number above bit ``SHIFT``."""
        return (number << SHIFT) + start if self.joined is None else self.joined[number] + start

    def _view(self, number: int) -> Tensor:
        """Source ``number``'s row view (made on first use)."""
        if number not in self._views:
            kind, *named, item = self.keys[number]
            if kind == "files":
                elements = self._joined(*named)
            else:
                elements = self.column.whole(*named) if kind == "file" else self.column.array(named[0]).reshape(-1)
            width = math.prod(item)
            self._views[number] = elements.as_strided((max(elements.numel() - width + 1, 0), width), (1, 1))
        return self._views[number]

    def _read(self, number: int, rows: Tensor) -> Tensor:
        """Rows ``rows`` of source ``number``, into memory that comes back."""
        view = self._view(number)
        out = self._outputs.empty((len(rows), view.shape[1]), view.dtype)
        return torch.index_select(view, 0, rows, out=out).reshape(len(rows), *self.keys[number][-1])

    def _join(self) -> list[int] | None:
        """Where each file starts (in elements) in one view of them all, the sources now that one view; None
        (each file its own view) for one source, where ``mapping`` is not available, or mixed sources."""
        if len(self.keys) < 2 or not mapping.AVAILABLE or any(key[0] != "file" for key in self.keys):
            return None
        if len({key[2:] for key in self.keys}) > 1:  # (dtype, item) differ
            return None
        _, _, dtype, item = self.keys[0]
        files = tuple(key[1] for key in self.keys)
        sizes = tuple(inside(self.column.run.path, file).stat().st_size for file in files)
        keys, self.keys = self.keys, [("files", files, sizes, dtype, item)]
        try:
            self._view(0)  # mapped here: a worker maps them again (``__getstate__``)
        except DamagedShardError:  # more files than this process may map, say: the same values, a view each
            self.keys = keys
            return None
        size = DTYPES[dtype].itemsize
        return [start // size for start in mapping.starts(sizes)[:-1]]

    def _joined(self, files: tuple[str, ...], sizes: tuple[int, ...], dtype: str) -> Tensor:
        """The files ``files`` end to end, as one 1-D view (``hookscope.store.mapping``)."""
        root = self.column.run.path
        try:
            return mapping.join([inside(root, file) for file in files], sizes, DTYPES[dtype])
        except OSError as err:  # a file gone or changed since the store was opened
            named = [file for file in files if err.filename and Path(err.filename).name == Path(file).name]
            raise DamagedShardError(named[0] if named else ", ".join(files), one_line(err)) from err

    def _source(self, where: tuple[Any, ...]) -> tuple[int, int, int, int]:
        """The array ``where``'s source number, its first element in that source, an item's width and bytes."""
        file, start, dtype, shape, offsets, _, flat = where
        item = (shape[-1],) if flat else tuple(shape[1:])
        width, begin = math.prod(item), start + offsets[0]
        size = torch.empty((), dtype=DTYPES[dtype]).element_size() if dtype in DTYPES else 0
        aligned = size > 0 and begin % size == 0
        if aligned and start + offsets[1] > self.column.whole(file, dtype).numel() * size:
            self.column.array(where)  # a file shorter than its header says: reading the array names the damage
        key = ("file", file, dtype, item) if aligned else ("array", where, item)
        if key not in self.numbers:
            self.numbers[key] = len(self.keys)
            self.keys.append(key)
        return self.numbers[key], begin // size if aligned else 0, width, width * max(size, 1)


class Outputs:
    """The memory of the last ``KEPT`` minibatches handed out, taken again once nothing holds it (at most
    ``KEPT`` minibatches' memory stays held after they are dropped). Threads reading one dataset take
    memory one at a time; another process gets none of it."""

    def __init__(self) -> None:
        self.given: list[torch.UntypedStorage] = []
        self.lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def empty(self, shape: tuple[int, int], dtype: torch.dtype) -> Tensor:
        """A tensor of ``shape`` and ``dtype`` to fill: over memory handed out before that nothing holds, or new.

        Args:
            shape: the minibatch's shape, ``(items, width)``.
            dtype: its dtype.

        Returns:
            A contiguous tensor whose values are to be written.
        """
        nbytes = shape[0] * shape[1] * dtype.itemsize
        with self.lock:
            free = next((n for n, s in enumerate(self.given) if s.nbytes() == nbytes and _alone(s)), None)
            if free is None:
                found = torch.empty(shape, dtype=dtype)
            else:
                found = torch.empty(0, dtype=dtype).set_(self.given.pop(free), 0, shape, (shape[1], 1))
            if nbytes:
                self.given = [*self.given[-(KEPT - 1) :], found.untyped_storage()]
        return found


def _alone(storage: torch.UntypedStorage) -> bool:
    """Nothing but this handle holds ``storage``: no tensor over it, and no other process maps it."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return count is not None and count(storage._cdata) == 1 and not storage.is_shared()
