"""How a long call says how far it got: one ``Progress`` type for every function that takes ``progress=``.

::

    hookscope.cam(model, x, method="scorecam", progress=True)              # a line per stage on stderr
    hookscope.build_report(model, x, progress=log_file)                      # the lines, to a stream
    hookscope.build_report(model, x, progress=lambda stage, done, total: ...)  # your own display

``None`` or ``False`` is quiet; ``True`` writes a line to stderr when each stage ends; a stream
(anything with ``write``) gets those lines; a callable is told ``(stage, done, total)``: at the
start of each stage with ``done=0`` and after each of its steps (``total`` is 0 when not known).
``callback(progress)`` turns any of them into that callable.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO, Union, cast

from .errors import OptionError

Callback = Callable[[str, int, int], None]  # (stage, done, total)
Progress = Union[bool, TextIO, Callback, None]


def callback(progress: Progress) -> Callback:
    """``progress`` as a ``(stage, done, total)`` callable (see the module docstring)."""
    if progress is None or progress is False:
        return quiet
    if progress is True:
        return Lines(None)
    if hasattr(progress, "write"):
        return Lines(cast(TextIO, progress))
    if callable(progress):
        return progress
    raise OptionError(
        f"progress must be True, False, None, a stream or a callable (stage, done, total), got {progress!r}"
    )


def quiet(stage: str, done: int, total: int) -> None:
    """Progress not shown."""


class Lines:
    """A line ``hookscope: STAGE DONE/TOTAL`` when a stage ends, on ``stream`` (None: stderr, read when
    written, so a redirected stderr is honoured)."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream

    def __call__(self, stage: str, done: int, total: int) -> None:
        if done >= total > 0:
            stream = self.stream if self.stream is not None else sys.stderr
            print(f"hookscope: {stage} {done}/{total}", file=stream, flush=True)
