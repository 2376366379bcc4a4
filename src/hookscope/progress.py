"""How a long call says how far it got: one ``Progress`` type for every function that takes ``progress=``.

::

    hookscope.cam(model, x, method="scorecam", progress=True)              # lines on stderr
    hookscope.build_report(model, x, progress=log_file)                      # the lines, to a stream
    hookscope.build_report(model, x, progress=lambda stage, done, total: ...)  # your own display

``None`` or ``False`` is quiet; a callable is told ``(stage, done, total)``: at the start of each
stage with ``done=0`` and after each of its steps (``total`` is 0 when not known). ``True`` (stderr)
or a stream (anything with ``write``) gets the one rendering, ``Lines``: a plain line
``hookscope: STAGE DONE/TOTAL`` when a stage ends, and one at most every ``EVERY`` seconds while a
stage runs longer (``extract`` adds its throughput to the line).

Why plain lines and not a bar redrawn with ``\\r``: the same text reads right on a terminal, in a
log file, in CI and in a notebook's stderr (where redrawn lines pile up or vanish), can be grepped,
and costs a short call one line per stage; the lines every ``EVERY`` seconds keep a long run (a
dataset through ``extract``) from looking hung. The command line draws its own bar on a terminal
(``hookscope.cli.meter``), as a callable. ``callback(progress)`` turns any of them into that callable.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO, Union, cast

from .errors import OptionError

Callback = Callable[[str, int, int], None]  # (stage, done, total)
Progress = Union[bool, TextIO, Callback, None]
EVERY = 10.0  # seconds between two lines of a stage that runs on


def callback(progress: Progress) -> Callback:
    """``progress`` as a ``(stage, done, total)`` callable (see the module docstring).

    Args:
        progress: None or False (quiet), True (a line on stderr per stage), a stream (anything with
            ``write``), or a callable ``(stage, done, total)``.

    Returns:
        A callable ``(stage, done, total) -> None``.

    Raises:
        OptionError: ``progress`` is none of those.
    """
    lines = rendered(progress)
    if lines is not None:
        return lines
    if progress is None or progress is False:
        return quiet
    if callable(progress):
        return progress
    raise OptionError(
        f"progress must be True, False, None, a stream or a callable (stage, done, total), got {progress!r}"
    )


def rendered(progress: Progress) -> Lines | None:
    """The ``Lines`` that ``progress`` asks for (``True``: stderr; a stream), else None.

    Args:
        progress: what a function was given as ``progress=``.

    Returns:
        A ``Lines`` for True (stderr) or a stream, else None.
    """
    if progress is True:
        return Lines(None)
    if progress is not None and progress is not False and hasattr(progress, "write"):
        return Lines(cast(TextIO, progress))
    return None


def quiet(stage: str, done: int, total: int) -> None:
    """Progress not shown.

    Args:
        stage: the stage's name.
        done: steps done.
        total: steps in all (0: not known).
    """


class Lines:
    """The one rendering: ``hookscope: STAGE DONE/TOTAL`` when a stage ends, and at most every
    ``every`` seconds (None: ``EVERY``, read when due) while it runs; on ``stream`` (None: stderr,
    read when written, so a redirected stderr is honoured). ``detail`` is added after a comma.

    Args:
        stream: where lines go; None writes to ``sys.stderr`` as it is when each line is written.
        every: seconds between two lines of a running stage; None reads ``EVERY`` when a line is due.
    """

    def __init__(self, stream: TextIO | None, every: float | None = None) -> None:
        self.stream, self.every = stream, every
        self.shown = time.monotonic()

    def __call__(self, stage: str, done: int, total: int, detail: str = "") -> None:
        ends = done >= total > 0
        every = EVERY if self.every is None else self.every
        if done == 0 and not ends:
            self.shown = time.monotonic()  # a stage starts: its first line is due EVERY seconds on
        elif ends or time.monotonic() - self.shown >= every:
            self.shown = time.monotonic()
            stream = self.stream if self.stream is not None else sys.stderr
            count = f"{done}/{total}" if total else str(done)
            tail = f", {detail}" if detail else ""
            print(f"hookscope: {stage} {count}{tail}", file=stream, flush=True)
