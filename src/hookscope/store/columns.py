"""A store's (site, kind, key) as a column of items, rows or tokens, for ``StoreDataset`` and ``StoreStream``.

A column lists, batch by batch, where its items lie: an array (a memory-mapped tensor of the
store, ``(items, ...)``), the first row in it and how many. In the row layout each batch's tensor is
its own array: ``(B, ...)`` by rows, ``(B*T, D)`` by tokens, less padding where the shard kept the
batch's ``attention_mask`` (then a table maps each token to its row). A store whose batch is one
sequence stepped through (a vLLM request: call 0 its prompt's rows, each later call one generated
token, ``hookscope.serving.sink``) reads every call of a batch, in call order: its ``parts`` (one, where the
request's calls are stored joined: ``hookscope.store.joined``). In the token layout
(``hookscope.store.token_layout``) one array holds every batch of a shard, so a random minibatch
is one gather (``hookscope.store.mapping`` joins a column's shards into one range). Arrays are
mapped on first use, in the process that reads them (a ``DataLoader`` worker maps its own).
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.select import Selector
from ..errors import DamagedShardError, NotCapturedError, OptionError, StoreError, StoreWarning
from .format import Entry
from .index import ranges
from .reader import Run, load, selected_sites
from .shards import MappedShards, inside, read_index

BY = ("rows", "tokens")
STEPPED = ("vllm",)  # the config sources whose batch is one sequence, its calls the steps: prefill, then a token each
Source = str | os.PathLike[str] | Run


@dataclass
class Column:
    """One (store, site, kind, key): per batch, its array, first row and count (``arrays`` mapped on use)."""

    run: Run
    site: str
    kind: str
    key: str
    places: dict[int, tuple[tuple[Any, ...], int, int]]  # batch -> (array, first row, items)
    masks: dict[int, Tensor] = field(default_factory=dict)  # batch -> the rows its tokens are (padding left out)
    parts: dict[int, list[tuple[int, tuple[Any, ...], int]]] = field(default_factory=dict)  # batch -> its calls'
    # (call, array, items), in call order, where a batch is a sequence stepped through (``stepped``)
    verify: bool = True
    _mapped: dict[tuple[Any, ...], Tensor] = field(default_factory=dict, repr=False)
    _files: dict[tuple[str, str], Tensor] = field(default_factory=dict, repr=False)

    def array(self, where: tuple[Any, ...]) -> Tensor:
        """The array ``where`` names: ``(file, data_start, dtype, shape, offsets, crc32, flat)``."""
        if where not in self._mapped:
            *located, flat = where
            file, start, dtype, shape, offsets, crc = located
            tensor = MappedShards(self.run.path, verify=self.verify).tensor(
                file, start, dtype, [*shape], [*offsets], crc
            )
            self._mapped[where] = tensor.reshape(-1, tensor.shape[-1]) if flat else tensor
        return self._mapped[where]

    def whole(self, file: str, dtype: str) -> Tensor:
        """The file ``file`` of the store as one 1-D ``dtype`` view (mapped once; bytes already checked)."""
        if (file, dtype) not in self._files:
            self._files[file, dtype] = MappedShards(self.run.path, verify=False).whole(file, dtype)
        return self._files[file, dtype]

    def items(self, batch: int) -> Tensor:
        """Every item of ``batch``, in order (a view where there is no padding to leave out)."""
        if batch in self.parts:
            return torch.cat([self.array(where)[:count] for _, where, count in self.parts[batch]])
        where, first, count = self.places[batch]
        rows = self.array(where)
        return rows[self.masks[batch]] if batch in self.masks else rows[first : first + count]

    def __getstate__(self) -> dict[str, Any]:  # a worker maps the files itself, nothing is copied
        return {**self.__dict__, "_mapped": {}, "_files": {}}


def columns(source: Source | Sequence[Source], select: Selector | None, kind: str, key: str | None,
            by: str, verify: bool) -> list[Column]:  # fmt: skip
    """The columns of every (store, selected site), store by store, sites in the store's order, less the
    batches any of them lost with a damaged shard (one ``StoreWarning`` names them; ``verify``: every
    array's CRC-32 is read here, once, so nothing is found damaged during an epoch)."""
    if by not in BY:
        raise OptionError(f"by must be 'rows' or 'tokens', got {by!r}")
    runs = [source] if isinstance(source, (str, os.PathLike, Run)) else list(source)
    with warnings.catch_warnings(record=True) as caught:  # load's warnings of damage: folded into one
        warnings.simplefilter("always", StoreWarning)
        opened = [r if isinstance(r, Run) else load(r, verify=verify) for r in runs]
        for run in opened:  # every shard's header, and the manifest's rows against it where not vouched for
            run.check()
    for w in (w for w in caught if not issubclass(w.category, StoreWarning)):
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    lost: dict[int, tuple[str, str]] = {}  # batch -> (shard, why), over every store
    for run in opened:
        lost.update({b: (f"{run.path}/{file}", run.damaged[file]) for b, file in run.lost.items()})
    found = [_column(run, site, kind, key, by, verify, lost) for run in opened for site in selected_sites(run, select)]
    if lost:
        for column in found:
            column.places = {b: p for b, p in column.places.items() if b not in lost}
        shards = dict(lost.values())
        named = "; ".join(f"{file} ({why})" for file, why in shards.items())
        warnings.warn(f"hookscope.store.columns: {ranges(sorted(lost))} left out, lost with {len(shards)} damaged "
                      f"shard(s): {named}; the dataset reads the others", StoreWarning,
                      stacklevel=_outside())  # fmt: skip
    return found


def stepped(run: Run) -> bool:
    """Whether each batch of ``run`` is one sequence stepped through (a vLLM request), its calls the steps.

    Args:
        run: the store.

    Returns:
        True for a store ``capture_llm(..., out=)`` wrote: its calls are read one after the other.
    """
    return run.config.get("source") in STEPPED


def _outside() -> int:
    """The ``stacklevel`` of the caller's first frame outside hookscope: a warning names the user's line."""
    package, level = str(Path(__file__).parents[1]), 1
    frame = inspect.currentframe()
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level - 1


def _column(run: Run, site: str, kind: str, key: str | None, by: str, verify: bool,
            lost: dict[int, tuple[str, str]]) -> Column:  # fmt: skip
    """The column of ``site``; batches whose shard turns out damaged (header, or with ``verify`` an array's
    bytes) go to ``lost`` instead."""
    rows = _rows(run, site, kind, key)
    tokens = run.config.get("layout") == "tokens"
    if tokens and by == "rows":
        raise OptionError(f"{run.path} is token-major (extract(..., layout='tokens')): it holds tokens, not rows; "
                          "pass by='tokens'")  # fmt: skip
    column = Column(run, site, kind, rows[0].key, {}, verify=verify)
    by_shard: dict[int, list[Entry]] = {}
    for entry in rows:
        by_shard.setdefault(entry.shard, []).append(entry)
    for number, held in by_shard.items():  # shard by shard: each mapped, checked and let go
        file = run.manifest["shards"][number]["file"]
        spans: dict[str, Any] = {}
        try:
            header = {**read_index(inside(run.path, file)), "file": file}
            spans = header["meta"].get("spans", {}) if tokens else {}
            checked = MappedShards(run.path, verify=True) if verify else None
            for entry in held:
                _locate(column, entry, header, by, checked)
        except DamagedShardError as err:  # the shard is damaged: every batch of the column in it is lost
            batches = [span[0] for e in held for span in spans.get(e.name, [[e.batch]])]
            lost.update(dict.fromkeys(batches, (f"{run.path}/{file}", err.why)))
            column.places = {b: p for b, p in column.places.items() if b not in lost}
    column.verify = False  # every array was read through its CRC-32 above, where asked
    return column


def _locate(column: Column, entry: Entry, header: dict[str, Any], by: str, checked: MappedShards | None) -> None:
    """Where ``entry``'s items lie in ``column`` (its array read through its CRC-32 by ``checked``, if given)."""
    start = column.run.manifest["shards"][entry.shard]["data_start"]  # as the header says (Run.check)
    where = (header["file"], start, entry.dtype, tuple(entry.shape), tuple(entry.offsets), entry.crc32)
    if checked is not None:
        checked.tensor(*where[:3], entry.shape, entry.offsets, entry.crc32)
    if column.run.config.get("layout") != "tokens":
        _place(column, entry, where, header, by)
        return
    for batch, begin, end in header["meta"]["spans"][entry.name]:
        column.places[batch] = ((*where, False), begin, end - begin)


def _rows(run: Run, site: str, kind: str, key: str | None) -> list[Entry]:
    """The index rows of ``site``'s ``kind`` at ``key`` (None: its first), first call of each batch, less those
    in damaged shards."""
    rows = [e for e in map(_entry, run.manifest.get("tensors", [])) if (e.site, e.kind) == (site, kind)]
    every = stepped(run)  # a sequence stepped through: every call is one of its steps
    if not every and any(e.call for e in rows):
        warnings.warn(f"hookscope.store.columns: {site!r} ran several times per batch in {run.path}; the dataset "
                      "reads its first call of each batch", StoreWarning, stacklevel=6)  # fmt: skip
    rows = [e for e in rows if (every or e.call == 0) and run.manifest["shards"][e.shard]["file"] not in run.damaged]
    key = key if key is not None else (rows[0].key if rows else "")
    rows = [e for e in rows if e.key == key]
    if not rows:
        raise NotCapturedError(f"the store {run.path} holds no {kind} at key {key!r} of {site!r}; pass kind= and key= "
                         "as run.describe() lists them")  # fmt: skip
    return rows


def _place(column: Column, entry: Entry, where: tuple[Any, ...], header: dict[str, Any], by: str) -> None:
    """Where a row-layout batch's items lie: its tensor by rows, or flattened to tokens less its padding."""
    if by == "tokens" and len(entry.shape) not in (2, 3):
        raise OptionError(f"by='tokens' reads (batch, tokens, features) or (batch, features) values; "
                          f"{entry.site} {entry.kind} is {tuple(entry.shape)}: pass by='rows'")  # fmt: skip
    flat = by == "tokens" and len(entry.shape) == 3
    count = entry.shape[0] * (entry.shape[1] if flat else 1)
    column.places[entry.batch] = ((*where, flat), 0, count)
    if stepped(column.run):  # one part per call, in call order; the batch's items are theirs, joined
        parts = sorted([*column.parts.get(entry.batch, []), (entry.call, (*where, flat), count)], key=lambda p: p[0])
        column.parts[entry.batch] = parts
        column.places[entry.batch] = (parts[0][1], 0, sum(p[2] for p in parts))
        return
    mask = read_input(column.run, header, "attention_mask", entry.batch, column.verify) if flat else None
    if mask is not None and mask.numel() == count:
        column.masks[entry.batch] = mask.reshape(-1).nonzero().squeeze(1)
        column.places[entry.batch] = ((*where, flat), 0, len(column.masks[entry.batch]))


def _entry(row: list[Any]) -> Entry:
    return Entry(*row)


def read_input(run: Run, header: dict[str, Any], key: str, batch: int, verify: bool = True) -> Tensor | None:
    """The input ``key`` (``attention_mask``, ``input_ids``, ``token_ids``) a shard kept for ``batch``, or None."""
    for row in header["meta"].get("inputs", []):
        if row["key"] == key and row["batch"] == batch:
            dtype, shape, offsets = header["tensors"][row["name"]]
            crc = header["meta"].get("crc32", {}).get(row["name"], -1)
            mapped = MappedShards(run.path, verify=verify)
            return mapped.tensor(header["file"], header["data_start"], dtype, shape, offsets, crc)
    return None


def align(found: list[Column]) -> tuple[list[int], Tensor]:
    """The batches every column holds, in order, and the first item of each (one more: the total)."""
    held = [set(c.places) for c in found]
    common = sorted(set.intersection(*held))
    for column, batches in zip(found, held, strict=True):
        first = found[0]
        for batch in (b for b in common if column.places[b][2] != first.places[b][2]):
            raise StoreError(f"batch {batch} has {column.places[batch][2]} items of {column.site} in "
                             f"{column.run.path} and {first.places[batch][2]} of {first.site} in {first.run.path}; "
                             "stores read together must come from the same batches")  # fmt: skip
        if len(batches) != len(common):
            warnings.warn(f"hookscope.store.columns: {len(batches) - len(common)} batches of {column.site} in "
                          f"{column.run.path} are not in every store read with it; they are left out",
                          StoreWarning, stacklevel=4)  # fmt: skip
    counts = torch.tensor([0] + [found[0].places[b][2] for b in common], dtype=torch.long)
    return common, counts.cumsum(0)
