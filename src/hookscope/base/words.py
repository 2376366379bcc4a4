"""What hookscope writes for people, once: aligned columns, progress bars, sizes, "closest" hints.

``columns`` lays out ``hookscope list`` and ``hookscope info``; ``bar`` draws the progress of
``extract`` and of the report's stages; ``format_size`` / ``parse_size`` read and write bytes
(powers of 1000, or of 1024 with an ``i``); ``closest`` is the hint every "no such name"
error ends with; ``shorten`` cuts a long name to fit a chart's legend or axis.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

from ..errors import OptionError

BAR_WIDTH = 24
LABEL_CHARS = 40  # the longest name a chart's legend or tick label shows whole


def columns(rows: Sequence[Sequence[str]], right: Iterable[int] = ()) -> list[str]:
    """Rows as aligned columns two spaces apart, the columns in ``right`` aligned right; no trailing spaces."""
    if not rows:
        return []
    flush_right = set(right)
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(w) if c in flush_right else cell.ljust(w)
            for c, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    """``[#####...]``: ``done`` of ``total`` as a bar of ``width`` characters."""
    filled = width * min(done, total) // max(total, 1)
    return f"[{'#' * filled}{'.' * (width - filled)}]"


def shorten(name: str, chars: int = LABEL_CHARS) -> str:
    """``name``, or its start and end around an ellipsis in ``chars`` characters (a 400-character
    module name must not squeeze a chart's axes to nothing)."""
    if len(name) <= chars:
        return name
    head = (chars - 1) // 2
    return f"{name[:head]}…{name[len(name) - (chars - 1 - head) :]}"


def closest(name: str, names: Iterable[str]) -> str:
    """``"; closest: 'a', 'b'"`` for the names most like ``name``, or ``""`` when none is close."""
    close = difflib.get_close_matches(name, list(names), n=3, cutoff=0.4)
    return f"; closest: {', '.join(repr(c) for c in close)}" if close else ""


def format_size(nbytes: float) -> str:
    """``1234567`` -> ``"1.2 MB"`` (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(nbytes) < 1000:
            return f"{nbytes:.0f} B" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} TB"


def parse_size(size: int | str) -> int:
    """``"2GB"``, ``"512 MiB"``, ``"1.5G"`` or a number of bytes -> bytes; a one-line error otherwise."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?)[bB]?\s*", str(size))
    if not match or float(match.group(1)) <= 0:
        raise OptionError(f"a size must be a positive number of bytes or a string like '2GB' or '512MiB', got {size!r}")
    base = 1024 if match.group(3) else 1000
    return int(float(match.group(1)) * base ** " KMGT".index(match.group(2).upper() or " "))
