"""Which tokens of a generation an edit changes: ``positions="new"``, ``"prompt"``, a slice or a mask.

::

    with hookscope.edit(model, {"transformer.h.1": edits.add(v, positions="new")}) as ed:
        model.generate(ids, max_new_tokens=5)      # the prompt call untouched, each new token steered

Under ``model.generate`` a module runs once on the prompt, then once per new token: with a KV cache
(the default) each later call sees only the token just added, without one (``use_cache=False``) the
whole sequence again. A ``Tokens`` tells them apart from the tensor alone, ``(B, T, ...)`` batch first,
so it works at any module, a block or a sub-layer that gets no keyword arguments (HF's
``cache_position`` reaches the model, not a GPT-2 block's hook: it is not read):

- the site's first call in the block is the prompt: its ``T`` tokens are positions ``0 .. T-1``, and
  ``T`` is the prompt's length;
- a later call longer than the sequence so far reads it again from the start (no cache): ``0 .. T-1``;
- any other call continues the sequence (a KV cache): positions ``S .. S+T-1`` after ``S`` tokens.

``"new"`` picks the positions at or past the prompt's length, ``"prompt"`` those before it, a slice
the positions it holds, counted from the prompt's first token (``slice(6, None)``: the 7th token on;
negative ends would move as the sequence grows, and are refused), and a boolean mask ``(L,)`` or
``(B, L)`` the positions it holds True at (positions past ``L``: not picked).
With and without the cache the same positions are edited, so the logits agree. A call that holds
no picked token is not edited and not counted; an edit that picked no token in any call is an
``EditError`` at the end of the block (``"new"`` when ``generate`` was not called inside it).
One generation per block: a second prompt in the same block would read as a continuation.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from ..errors import EditError
from .values import Where

Span = Literal["new", "prompt"] | slice | Tensor  # a Tensor: a boolean mask over the sequence's positions


class Tokens:
    """A choice of token positions read across the calls of a generation (module doc).

    Args:
        span: ``"new"``, ``"prompt"``, a slice of the sequence's positions or a boolean mask ``(L,)``
            or ``(B, L)``.

    Raises:
        EditError: anything else, or an empty mask.
    """

    def __init__(self, span: Span) -> None:
        if isinstance(span, Tensor):
            if span.dtype != torch.bool or span.dim() not in (1, 2) or span.numel() == 0:
                raise EditError(f"positions= as a mask is a non-empty bool tensor (L,) or (B, L), got {span!r}")
            span = span.detach().cpu()
        elif isinstance(span, slice):
            ends = (span.start or 0, span.stop if span.stop is not None else 0, span.step or 1)
            if not all(isinstance(n, int) and n >= 0 for n in ends) or ends[2] == 0:
                raise EditError(f"positions= as a slice counts from the prompt's first token: ends >= 0, got {span}")
        elif span not in ("new", "prompt"):
            raise EditError(f"positions= is 'new', 'prompt', a slice, a bool mask or integer indices, got {span!r}")
        self.span = span
        self._seen: dict[tuple[str, str], tuple[int, int]] = {}  # (site, key) -> (prompt length, tokens so far)
        self._last: dict[tuple[str, str], tuple[int, Tensor]] = {}  # (site, key) -> (call, its pick)

    def __str__(self) -> str:
        if isinstance(self.span, Tensor):
            return f"mask{tuple(self.span.shape)}"
        return repr(self.span) if isinstance(self.span, str) else f"slice({self.span.start}, {self.span.stop})"

    def pick(self, tensor: Tensor, where: Where) -> Tensor:
        """The tokens of this call to edit: a bool ``(1, T)`` or ``(B, T)`` on the CPU (read once per call).

        Args:
            tensor: the call's tensor, ``(B, T, ...)``.
            where: the call (its site, key and index).

        Returns:
            The mask over dimension 1 of ``tensor``.

        Raises:
            EditError: the tensor has fewer than 2 dims, or a mask's batch differs from the tensor's.
        """
        place = (where.site, where.key)
        last = self._last.get(place)
        if last is not None and last[0] == where.call:  # a recomputation (checkpointing) repeats a call
            return last[1]
        if tensor.dim() < 2:
            raise EditError(f"positions={self} needs (B, T, ...) tokens at {where}, got shape {tuple(tensor.shape)}")
        picked = self._picked(self._positions(tensor.shape[1], place, where.call), tensor.shape[0], where)
        self._last[place] = (where.call, picked)
        return picked

    def missed(self, ran: int) -> str:
        """Why the edit changed no call: what the ``ran`` calls held, and the fix."""
        if self.span == "new":
            return (
                f"positions='new' found no new token in {ran} call(s): each was a prompt; "
                "call model.generate(...) inside the block"
            )
        return f"positions={self} picked no token in {ran} call(s)"

    def _positions(self, length: int, place: tuple[str, str], call: int) -> Tensor:
        """The positions in the sequence of this call's ``length`` tokens; the sequence so far updated."""
        prompt, seen = self._seen.get(place, (length, 0)) if call > 0 else (length, 0)
        start = 0 if length > seen else seen  # longer than the sequence: read again; else continued
        self._seen[place] = (prompt, max(seen, start + length))
        return torch.arange(start, start + length)

    def _picked(self, positions: Tensor, batch: int, where: Where) -> Tensor:
        prompt = self._seen[(where.site, where.key)][0]
        if self.span == "new":
            return (positions >= prompt)[None]
        if self.span == "prompt":
            return (positions < prompt)[None]
        if isinstance(self.span, slice):
            start, step = self.span.start or 0, self.span.step or 1
            stop = self.span.stop if self.span.stop is not None else int(positions.max()) + 1
            return ((positions >= start) & (positions < stop) & ((positions - start) % step == 0))[None]
        mask = self.span if self.span.dim() == 2 else self.span[None]
        if mask.shape[0] not in (1, batch):
            raise EditError(f"positions= mask of {mask.shape[0]} rows for a batch of {batch} at {where}")
        inside = positions < mask.shape[1]
        picked = torch.zeros(mask.shape[0], len(positions), dtype=torch.bool)
        picked[:, inside] = mask[:, positions[inside]]
        return picked
