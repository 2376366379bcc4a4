"""An answer for an assistant in sections, cut to a token budget by dropping whole sections, lowest value first.

A tool's answer is a list of ``Section``s, each with a ``value`` (higher is kept longer) and a
``kept`` flag for facts that must never be dropped: what could not be captured or read, damage,
a run that ended on a non-finite value. ``fit(tool, sections, max_tokens)`` drops droppable
sections, lowest value first (the later one first among equals), until the answer fits, and
returns an ``Answer`` that lists what it dropped and how many tokens each would have cost. An
answer whose kept facts alone exceed the budget is returned whole with ``over_budget`` set: a
fact is never dropped to meet a budget.

Tokens are estimated, not counted by a tokenizer: ``ceil(bytes / 4)`` of the UTF-8 text, the
usual rate of English and code for the tokenizers assistants use (``TOKEN_BYTES``). The note that
lists dropped sections is part of the answer and counts against the budget.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import OptionError

TOKEN_BYTES = 4  # UTF-8 bytes per token, the estimate every budget here uses
DEFAULT_TOKENS = 2000


def tokens(text: str) -> int:
    """The estimated tokens of ``text``: ``ceil(len(utf8) / TOKEN_BYTES)``.

    Args:
        text: any text.

    Returns:
        The estimate (0 for an empty text).
    """
    return math.ceil(len(text.encode("utf-8")) / TOKEN_BYTES)


@dataclass(frozen=True)
class Section:
    """One part of an answer: a title, its text, and the data behind it.

    Attributes:
        title: a short heading, unique within the answer.
        text: what an assistant reads (plain text or Markdown).
        data: the same facts as JSON-able values (the structured answer).
        value: how much the section is worth keeping; higher values are dropped last.
        kept: a fact that is never dropped (what could not be captured, damage, a non-finite end).
    """

    title: str
    text: str
    data: Any = None
    value: int = 50
    kept: bool = False

    def render(self) -> str:
        """``## title`` and the text.

        Returns:
            The section as Markdown.
        """
        return f"## {self.title}\n{self.text.rstrip()}\n"


@dataclass(frozen=True)
class Answer:
    """A tool's answer after ``fit``: the sections kept, in their order, and what was dropped.

    Attributes:
        tool: the tool that answered.
        sections: the sections kept, in the tool's order.
        dropped: (title, estimated tokens) of each dropped section, in the tool's order.
        max_tokens: the budget.
        over_budget: the kept facts alone exceed the budget (they were not dropped).
    """

    tool: str
    sections: tuple[Section, ...]
    dropped: tuple[tuple[str, int], ...] = ()
    max_tokens: int = DEFAULT_TOKENS
    over_budget: bool = field(default=False)

    def text(self) -> str:
        """The answer as Markdown, ending with what was dropped (if anything) and why.

        Returns:
            The text an assistant reads.
        """
        return "\n".join([*(s.render() for s in self.sections), *self._notes()]).rstrip() + "\n"

    def data(self) -> dict[str, Any]:
        """The answer as JSON-able data: each kept section's data by title, and the budget's account.

        Returns:
            ``{"tool", "sections": {title: data}, "dropped": [{"title", "tokens"}], "max_tokens", "tokens",
            "over_budget"}``.
        """
        return {
            "tool": self.tool,
            "sections": {s.title: s.data if s.data is not None else s.text for s in self.sections},
            "dropped": [{"title": t, "tokens": n} for t, n in self.dropped],
            "max_tokens": self.max_tokens,
            "tokens": self.tokens,
            "over_budget": self.over_budget,
        }

    @property
    def tokens(self) -> int:
        """The estimated tokens of ``text()``.

        Returns:
            ``tokens(self.text())``.
        """
        return tokens(self.text())

    def _notes(self) -> list[str]:
        notes = []
        if self.dropped:
            listed = ", ".join(f"{title} (~{n} tokens)" for title, n in self.dropped)
            notes.append(
                f"## Left out\nTo fit max_tokens={self.max_tokens}, whole sections were left out, lowest value "
                f"first: {listed}. Ask again with a larger max_tokens, or ask the tool that answers just that part.\n"
            )
        if self.over_budget:
            notes.append(
                f"## Over budget\nThe facts above are never left out (what could not be captured, damage, a "
                f"non-finite end), and alone they exceed max_tokens={self.max_tokens}.\n"
            )
        return notes


def fit(tool: str, sections: Sequence[Section], max_tokens: int = DEFAULT_TOKENS) -> Answer:
    """Drop whole droppable sections, lowest value first, until the answer's text fits ``max_tokens``.

    Then a dropped section is taken back, highest value first, wherever it still fits: a small
    section is not lost because a larger one of higher value had to go.

        Args:
            tool: the tool's name (kept in the answer).
            sections: the whole answer, in reading order; titles are unique.
            max_tokens: the budget in estimated tokens (``tokens``); at least 50.

        Returns:
            The ``Answer``: what fits, what was dropped, and whether kept facts alone exceed the budget.

        Raises:
            OptionError: ``max_tokens`` is below 50, or two sections share a title.
    """
    if max_tokens < 50:
        raise OptionError(f"max_tokens={max_tokens} is too small for any answer; pass at least 50")
    titles = [s.title for s in sections]
    if len(set(titles)) != len(titles):
        raise OptionError(f"an answer's section titles must be unique, got {titles}")
    order = sorted((s for s in sections if not s.kept), key=lambda s: (s.value, -titles.index(s.title)))
    gone: set[str] = set()
    answer = _without(tool, sections, gone, max_tokens)
    for section in order:  # drop, lowest value first, until it fits
        if answer.tokens <= max_tokens:
            break
        gone.add(section.title)
        answer = _without(tool, sections, gone, max_tokens)
    for section in reversed(order):  # then take back, highest value first, what still fits beside the rest
        if section.title in gone:
            tried = _without(tool, sections, gone - {section.title}, max_tokens)
            if tried.tokens <= max_tokens:
                gone.discard(section.title)
                answer = tried
    if answer.tokens > max_tokens:
        answer = Answer(tool, answer.sections, answer.dropped, max_tokens, over_budget=True)
    return answer


def _without(tool: str, sections: Sequence[Section], gone: set[str], max_tokens: int) -> Answer:
    kept = tuple(s for s in sections if s.title not in gone)
    dropped = tuple((s.title, tokens(s.render())) for s in sections if s.title in gone)
    return Answer(tool, kept, dropped, max_tokens)


def table_sections(
    title: str, header: Sequence[str], rows: Sequence[Sequence[str]], *, value: int, first: int = 20
) -> list[Section]:
    """A table as sections: the first ``first`` rows worth ``value``, the rest one section worth less.

    A long table is the usual thing a budget cuts; split so, the head survives a budget the whole
    table would not fit.

    Args:
        title: the table's title (the rest is titled ``title (rows N-M)``).
        header: the column names.
        rows: the rows, as strings.
        value: the head's value; the rest's is ``value - 10``.
        first: how many rows the head holds.

    Returns:
        One or two sections, each a Markdown table with the header.
    """
    head, rest = list(rows[:first]), list(rows[first:])
    parts = [Section(title, markdown_table(header, head), [dict(zip(header, r, strict=True)) for r in head], value)]
    if rest:
        parts.append(
            Section(
                f"{title} (rows {first + 1}-{len(rows)})",
                markdown_table(header, rest),
                [dict(zip(header, r, strict=True)) for r in rest],
                value - 10,
            )
        )
    return parts


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``| a | b |`` rows under a header line.

    Args:
        header: the column names.
        rows: the cells, as strings.

    Returns:
        The table as Markdown (the header alone when there are no rows).
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def compact(value: Any) -> str:
    """``value`` as one line of JSON (keys in order, no spaces beyond the separators).

    Args:
        value: a JSON-able value.

    Returns:
        The JSON text.
    """
    return json.dumps(value, separators=(", ", ": "), default=str)
