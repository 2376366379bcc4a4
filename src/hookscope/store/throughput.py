"""How far an ``extract`` got: its ``progress=`` lines, with the rows per second and the bytes written.

``Meter`` renders through ``hookscope.progress`` (the one rendering, ``Lines``), or tells a
callable ``("extract", done, total)`` after each batch.
"""

from __future__ import annotations

import time

from ..base.words import format_size
from ..progress import Callback, Progress, callback, quiet, rendered


class Meter:
    """``progress=`` of a run: the one rendering (``hookscope.progress.Lines``), a line when the run
    ends and at most every ``EVERY`` seconds before, with its throughput (rows per second, bytes
    written and their rate); or a callable told ``("extract", done, total)`` after each batch."""

    def __init__(self, progress: Progress, total: int | None) -> None:
        self.lines = rendered(progress)
        self.told: Callback = callback(progress) if self.lines is None else quiet
        self.total = total
        self.batches = self.rows = 0
        self.start = time.monotonic()
        self.told("extract", 0, total or 0)
        if self.lines is not None:
            self.lines("extract", 0, total or 0)

    def step(self, rows: int | None, written: int) -> None:
        self.batches += 1
        self.rows += rows or 0
        self.told("extract", self.batches, self.total or 0)
        if self.lines is not None and self.batches != self.total:  # the last line waits for close: all written
            self.lines("extract", self.batches, self.total or 0, self._detail(written))

    def close(self, written: int) -> None:
        """The last line, with the bytes written (a run that stopped early: only when a line is due)."""
        if self.lines is not None and self.batches:
            self.lines("extract", self.batches, self.total or self.batches, self._detail(written))

    def _detail(self, written: int) -> str:
        seconds = max(time.monotonic() - self.start, 1e-9)
        detail = f"{self.rows / seconds:,.1f} rows/s"
        if written:
            detail += f", {format_size(written)} written ({format_size(written / seconds)}/s)"
        return detail
