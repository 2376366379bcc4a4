"""A sequence's calls stored joined: one tensor per (site, kind, key), the rows of each call beside it.

A vLLM capture (``hookscope.serving.sink``) steps one request through each site: call 0 its prompt's
rows (the first chunk where vLLM chunked the prefill), then one row per decode step. Stored call by
call that is one tensor and one index row per (site, kind, key, call): ~24.6k rows (~4 MB of
manifest) for a 32-layer model's three keys over 256 new tokens, per request. Joined
(``join_calls``), a request is one ``(T, ...)`` tensor per (site, kind, key), T its prompt rows plus
its decode steps, indexed as call 0; the batch's row of the manifest lists each call's rows
(``call_rows``, the same for every site of the request) and ``load`` splits the tensor back into the
calls (``split_calls``: views of it), so readers give back the calls that were put in.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from ..core.call import Call
from ..core.records import Record
from ..errors import StoreError

CALL_ROWS = "call_rows"  # the field of a batch's manifest row: the rows of each call, where its calls are joined


def join_calls(records: Mapping[str, Record]) -> tuple[dict[str, Record], list[int]] | None:
    """Each site's calls joined into one call, and the rows of each call; None where they cannot be.

    Args:
        records: a sequence's records, site -> its calls in order, every kept tensor ``(rows, ...)``.

    Returns:
        site -> a copy of its record holding one call (call 0: each (kind, key) the calls' tensors
        concatenated along dim 0), and the rows of each call; None where the sites' calls differ in
        rows, a call holds tensors of different rows or keys, no site has a call, or a record holds
        parameter gradients (then the calls are stored one by one).
    """
    counts: list[int] | None = None
    joined: dict[str, Record] = {}
    for site, record in records.items():
        if any(record.param_grads.values()):
            return None
        rows = [_rows(call, record.calls[0]) for call in record.calls]
        if None in rows or (counts is not None and rows and rows != counts):
            return None
        counts = counts if not rows else [r for r in rows if r is not None]
        joined[site] = _joined(record) if record.calls else record
    return (joined, counts) if counts else None


def split_calls(tensor: Tensor, counts: Sequence[int], where: str) -> list[Tensor]:
    """A joined tensor split back into its calls' tensors (views of it), ``counts[k]`` rows for call k.

    Args:
        tensor: the stored ``(T, ...)`` tensor.
        counts: the rows of each call (the batch's ``call_rows``).
        where: what the tensor is (site, kind, key, batch), for the error.

    Returns:
        One tensor per call, in call order.

    Raises:
        StoreError: the tensor does not hold ``sum(counts)`` rows.
    """
    if tensor.dim() == 0 or tensor.shape[0] != sum(counts):
        raise StoreError(f"{where} is {tuple(tensor.shape)}, where the batch's call_rows add up to {sum(counts)} rows; "
                         "the manifest and the shard disagree: open the store with its own manifest")  # fmt: skip
    return list(torch.split(tensor, list(counts)))


def call_rows(batches: Sequence[Mapping[str, Any]]) -> dict[int, list[int]]:
    """batch -> the rows of each of its calls, for the batches stored joined (``CALL_ROWS``).

    Args:
        batches: the manifest's ``batches`` rows.

    Returns:
        The joined batches' call rows, by batch index.
    """
    return {b["index"]: b[CALL_ROWS] for b in batches if CALL_ROWS in b}


def _rows(call: Call, first: Call) -> int | None:
    """The rows every tensor of ``call`` holds, where it holds the same keys and layouts as ``first``."""
    keys = {kind: set(d) for kind, d in call.tensors.items()}
    if keys != {kind: set(d) for kind, d in first.tensors.items()} or call.layouts != first.layouts:
        return None
    rows = {t.shape[0] if t.dim() else -1 for d in call.tensors.values() for t in d.values()}
    return rows.pop() if len(rows) == 1 and -1 not in rows else None


def _joined(record: Record) -> Record:
    first = record.calls[0]
    tensors = {kind: {key: torch.cat([c.tensors[kind][key] for c in record.calls]) for key in held}
               for kind, held in first.tensors.items()}  # fmt: skip
    call = Call(record.name, 0, tensors, order=first.order, layouts=first.layouts)
    new = copy.copy(record)
    new.set_calls([call])
    return new
