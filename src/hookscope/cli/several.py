"""``hookscope report`` of a model with several inputs (a ``.pt`` of a tuple or a dict): the first input is
the one the report runs on (its batch, its shape in the page's head), the others are held as the file
gives them.

A seq2seq model's ``model(src, tgt)`` is reported as ``model(src)`` with ``tgt`` fixed: within
``first_input``, a forward pre-hook on the model adds the other inputs to each call, so every module
keeps its name (no wrapper adds a prefix) and the capture, the graph and the gradients see the same
pass as ``model(*inputs)``; the hook is gone after, even on an error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import Tensor, nn

from ..core.hooks import HandleGroup
from .inputs import LoadedInput


@contextlib.contextmanager
def first_input(model: nn.Module, batch: LoadedInput, device: str) -> Iterator[tuple[Tensor, str | None]]:
    """The tensor the report runs on, and a note naming what is held fixed (None for one input).

    Args:
        model: the model; for several inputs a call with the first alone gets the others while the block runs.
        batch: the inputs as the command read them.
        device: where the model runs.

    Yields:
        ``(x, note)``: the first input on ``device``, and the note for the page (None for one input).
    """
    args, kwargs = batch.feed(device)
    if not batch.several:
        yield args[0], None
        return
    if args:
        x, rest, named = args[0], args[1:], kwargs
        held = f"inputs 2 to {len(args)} of {batch.names[0]}" if len(args) > 2 else f"input 2 of {batch.names[0]}"
    else:
        key = next(iter(kwargs))
        x, rest, named = kwargs[key], (), {k: v for k, v in kwargs.items() if k != key}
        held = ", ".join(named) + f" of {batch.names[0]}"

    def the_rest(_: nn.Module, given: tuple[Any, ...], more: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if not args:  # a dict: the first input is passed by its name
            return (), {key: given[0], **named, **more} if given else {**more, **named}
        return (*given, *rest), {**named, **more}

    handles = HandleGroup()
    handles.on_forward_pre(model, the_rest)
    try:
        yield x, f"input: the first of the model's inputs is reported, {held} held as given"
    finally:
        handles.remove()
