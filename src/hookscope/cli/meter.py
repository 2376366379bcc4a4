"""Progress on stderr for the command line: one line redrawn in place on a terminal, else the
library's one rendering (``hookscope.progress.Lines``: a plain line when a stage ends and at most
every ``EVERY`` seconds while it runs), so a long run is never silent and a log stays readable.

``progress(stage, done, total)`` is the callable the commands pass as ``progress=``.
"""

from __future__ import annotations

import sys

from .. import progress as lines
from ..base.words import bar

EVERY = 10.0  # seconds between two lines when stderr is not a terminal


class Stages:
    """The stages of a command: redrawn in place on a terminal, else ``hookscope.progress.Lines``."""

    def __init__(self, every: float | None = None) -> None:
        self.every = every  # None: EVERY, read when a line is due
        self.plain = lines.Lines(None)

    def __call__(self, stage: str, done: int, total: int) -> None:
        if sys.stderr.isatty():
            end = "\n" if done >= total else ""
            print(f"\r{stage:<24} {bar(done, total)} {done}/{total}", end=end, file=sys.stderr, flush=True)
            return
        self.plain.every = EVERY if self.every is None else self.every
        self.plain(stage, done, total)


progress = Stages()
