"""What a vLLM edit block did: a row per (request, site, edit, call), and what it failed to do.

Call 0 of a request is its prefill, call ``k`` its ``k``-th decode step. Each row holds the
elements changed out of those seen and the relative change ``|y' - y| / |y|`` (Frobenius norms of
the request's rows, as ``hookscope.edit``'s report). ``failures`` is what ``LLMEdit`` raises on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..base.display import Shows, table_of


@dataclass(frozen=True)
class RequestEditRow:
    """One edit applied to one call of one request (``step``: ``prefill`` or ``decode``)."""

    request: str
    site: str
    edit: str
    key: str
    call: int
    changed: int  # elements whose value changed
    elements: int  # elements the edit saw
    relative: float  # |y' - y| / |y| over the request's rows of this call

    @property
    def step(self) -> str:
        """``prefill`` for call 0, ``decode`` for the others."""
        return "prefill" if self.call == 0 else "decode"


class RequestEdits(Shows):
    """Every edit of a vLLM edit block, per request and call: ``str()`` is a table, ``rows`` the figures.

    Args:
        counted: the workers' rows (``hookscope.serving.steering``): one dict per application, or a
            ``{"site", "note"}`` problem.
    """

    def __init__(self, counted: Sequence[dict[str, Any]]) -> None:
        self.rows = [_row(c) for c in counted if "note" not in c]
        self.problems = [(c["site"], c["note"]) for c in counted if "note" in c]
        self.zeroes = {(c["site"], c["edit"]) for c in counted if c.get("zeroes")}  # zero-ablations

    def __iter__(self) -> Iterator[RequestEditRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return table_of(self)

    def table(self) -> str:
        """A row per (request, site, edit, call): step, elements changed, relative change (text).

        Returns:
            The table, as text.
        """
        return table_of(self)

    def calls(self, request: str, site: str | None = None) -> list[int]:
        """The calls of ``request`` an edit changed (at ``site``, or at any site), in order.

        Args:
            request: the request id.
            site: one module's name; None: any.

        Returns:
            The call indices (0: the prefill).
        """
        return sorted({r.call for r in self.rows if r.request == request and site in (None, r.site)})


def failures(
    report: RequestEdits, requests: Sequence[str] | None, fired: dict[str, int], silent: Callable[[str], str]
) -> list[str]:
    """Why edits did not take effect: a site that never ran (``silent(site)`` says why), a chosen
    request never edited, a problem a worker noted, an edit that changed nothing.

    Args:
        report: the block's report.
        requests: the requests the block was limited to; None: any.
        fired: site -> the steps it ran in.
        silent: site -> why it never ran.

    Returns:
        One line per failure.
    """
    found = [f"the edit at {site!r} never ran: {silent(site)}" for site, n in fired.items() if n == 0]
    found += [f"{site!r}: {why}" for site, why in report.problems]
    edited = {r.request for r in report.rows}
    found += [f"request {r!r} was never edited: it did not run inside the block" for r in requests or ()
              if r not in edited and not found]  # fmt: skip
    totals: dict[tuple[str, str], int] = {}
    for row in report.rows:
        totals[(row.site, row.edit)] = totals.get((row.site, row.edit), 0) + row.changed
    found += [f"{edit} at {site!r} changed nothing in any call" for (site, edit), n in totals.items()
              if n == 0 and (site, edit) not in report.zeroes]  # fmt: skip
    return found


def _row(counted: dict[str, Any]) -> RequestEditRow:
    diff, base = math.sqrt(counted["diff2"]), math.sqrt(counted["base2"])
    relative = diff / base if base > 0 else (0.0 if diff == 0 else math.inf)
    return RequestEditRow(counted["request"], counted["site"], counted["edit"], counted["key"], counted["call"],
                          counted["changed"], counted["elements"], relative)  # fmt: skip
