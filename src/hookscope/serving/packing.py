"""A step of vLLM's continuous batching, read as requests: which rows of the packed batch are whose.

vLLM runs every scheduled request in one forward pass over one ``(T, ...)`` tensor: request ``i``
owns rows ``query_start_loc[i]:query_start_loc[i + 1]`` (the forward context's attention
metadata), in the order of the model runner's ``input_batch.req_ids``. A request's first step is
its prefill (positions from 0), each later one a decode step (one row). ::

    rows = slices(["0-a1", "1-b2"], [0, 5, 8], positions, [5, 3])
    rows[1]         # Slice(request='1', start=5, end=8, first=0, prompt=3)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

WHICH = ("prompt", "new")  # the positions= an edit can be limited to, besides None (all)


@dataclass(frozen=True)
class Slice:
    """One request's rows in a packed step: ``start:end``; ``first`` the position of its first row."""

    request: str  # the id generate's outputs carry (RequestOutput.request_id)
    start: int
    end: int
    first: int  # the position of row `start` in the request's sequence
    prompt: int  # the request's prompt length: positions below it are prompt tokens


def public_id(internal: str) -> str:
    """The id ``LLM.generate`` returns for the engine's internal request id (``"3-9f1c2a"`` -> ``"3"``)."""
    head, dash, tail = internal.rpartition("-")
    return head if dash and head and all(c in "0123456789abcdef" for c in tail) else internal


def slices(ids: Sequence[str], starts: Sequence[int], positions: Tensor | None, prompts: Sequence[int]) -> list[Slice]:
    """The requests of one step: ``ids`` in batch order, ``starts`` its ``query_start_loc`` (one more than
    ``ids``), ``positions`` the ``(T,)`` positions of the packed rows (None: each request from 0)."""
    found = []
    for i, internal in enumerate(ids):
        start, end = int(starts[i]), int(starts[i + 1])
        if end <= start:
            continue
        first = int(positions[start]) if positions is not None and positions.dim() == 1 else 0
        found.append(Slice(public_id(internal), start, end, first, int(prompts[i])))
    return found


def fused(output: object) -> Tensor | None:
    """A decoder layer's fused pair ``(hidden, residual)`` summed (the residual stream); None for anything else."""
    if isinstance(output, tuple) and len(output) == 2:
        hidden, residual = output
        if isinstance(hidden, Tensor) and isinstance(residual, Tensor) and hidden.shape == residual.shape:
            return hidden + residual
    return None


def chosen_rows(piece: Slice, which: str | Sequence[int] | None) -> Tensor | None:
    """A ``(n,)`` bool mask of the rows of ``piece`` an edit limited to ``which`` touches; None: all of them.

    ``which``: ``"prompt"`` (the prompt's tokens), ``"new"`` (the generated ones) or positions."""
    if which is None:
        return None
    at = torch.arange(piece.first, piece.first + piece.end - piece.start)
    if which == "prompt":
        return at < piece.prompt
    if which == "new":
        return at >= piece.prompt
    wanted = torch.tensor(sorted({int(p) for p in which}), dtype=at.dtype)
    return torch.isin(at, wanted)
