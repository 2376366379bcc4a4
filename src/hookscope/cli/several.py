"""``hookscope report`` of a model with several inputs (a ``.pt`` of a tuple or a dict): the first input is
the one the report runs on (its batch, its shape in the page's head), the others are held as the file
gives them.

A seq2seq model's ``model(src, tgt)`` is reported as ``model(src)`` with ``tgt`` fixed: within
``first_input``, the model's ``forward`` takes the first input alone and passes the rest on, so every
module keeps its name (no wrapper adds a prefix), the capture, the graph and the gradients see the
same pass as ``model(*inputs)``; the model's own ``forward`` is back after, even on an error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import Tensor, nn

from .inputs import LoadedInput


@contextlib.contextmanager
def first_input(model: nn.Module, batch: LoadedInput, device: str) -> Iterator[tuple[Tensor, str | None]]:
    """The tensor the report runs on, and a note naming what is held fixed (None for one input).

    Args:
        model: the model; for several inputs its ``forward`` takes the first alone while the block runs.
        batch: the inputs as the command read them.
        device: where the model runs.

    Yields:
        ``(x, note)``: the first input on ``device``, and the note for the page (None for one input).
    """
    args, kwargs = batch.feed(device)
    if not batch.several:
        yield args[0], None
        return
    own = model.__dict__.get("forward")  # an instance attribute of its own, put back after
    forward = model.forward
    if args:
        x, rest, named = args[0], args[1:], kwargs
        held = f"inputs 2 to {len(args)} of {batch.names[0]}" if len(args) > 2 else f"input 2 of {batch.names[0]}"

        def first_only(first: Tensor) -> Any:
            return forward(first, *rest, **named)
    else:
        key = next(iter(kwargs))
        x, others = kwargs[key], {k: v for k, v in kwargs.items() if k != key}
        held = ", ".join(others) + f" of {batch.names[0]}"

        def first_only(first: Tensor) -> Any:
            return forward(**{key: first}, **others)

    object.__setattr__(model, "forward", first_only)
    try:
        yield x, f"input: the first of the model's inputs is reported, {held} held as given"
    finally:
        if own is None:
            del model.__dict__["forward"]
        else:
            object.__setattr__(model, "forward", own)
