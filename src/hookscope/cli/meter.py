"""Progress on stderr: one line redrawn in place on a terminal, a plain line every ``EVERY`` seconds
otherwise (a log file, CI, ``nohup``), so a long run is never silent and a short one adds nothing.

``progress(stage, done, total)`` is the report's callback (``build_report(progress=...)``);
``extract_progress(enabled)`` is what ``extract(progress=...)`` is given: ``True`` on a terminal
(its own redrawn line), else a ``Lines`` stream that turns that redrawn line into plain lines.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO, cast

from ..base.words import bar

EVERY = 10.0  # seconds between two lines when stderr is not a terminal


class Stages:
    """The report's stages: redrawn in place on a terminal, else a line at most every ``every`` seconds."""

    def __init__(self, every: float | None = None) -> None:
        self.every, self.shown = every, time.monotonic()  # every=None: EVERY, read when a line is due

    def __call__(self, stage: str, done: int, total: int) -> None:
        if sys.stderr.isatty():
            end = "\n" if done >= total else ""
            print(f"\r{stage:<24} {bar(done, total)} {done}/{total}", end=end, file=sys.stderr, flush=True)
        elif time.monotonic() - self.shown >= (EVERY if self.every is None else self.every):
            self.shown = time.monotonic()
            print(f"hookscope: {stage} {done}/{total}", file=sys.stderr, flush=True)


class Lines:
    """A stream for a progress line redrawn with ``\\r``: it writes the latest state as a plain line at
    most every ``every`` seconds, and the final state if it wrote any line before."""

    def __init__(self, target: TextIO, every: float | None = None) -> None:
        self.target, self.every = target, EVERY if every is None else every
        self.pending, self.last, self.lines, self.shown = "", "", 0, time.monotonic()

    def write(self, text: str) -> int:
        latest = text.split("\r")[-1]
        if latest.strip() and latest.rstrip("\n") != self.last:
            self.pending = latest.rstrip("\n")
        finished = text.endswith("\n")
        if self.pending and (time.monotonic() - self.shown >= self.every or (finished and self.lines)):
            self.target.write(self.pending + "\n")
            self.target.flush()
            self.last, self.pending, self.lines, self.shown = self.pending, "", self.lines + 1, time.monotonic()
        return len(text)

    def flush(self) -> None:
        self.target.flush()


def extract_progress(enabled: bool) -> bool | TextIO:
    """``extract``'s ``progress=``: off, its own line on a terminal, else plain lines (``Lines``) on stderr."""
    if not enabled or sys.stderr.isatty():
        return enabled
    return cast(TextIO, Lines(sys.stderr))


progress = Stages()
