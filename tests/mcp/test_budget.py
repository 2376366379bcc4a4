"""The token budget: whole sections dropped lowest value first, listed, and kept facts never dropped.

The oracle is a hand count: each section's estimated tokens is ceil(bytes / 4) of its rendered text.
"""

from __future__ import annotations

import math

import pytest

from hookscope.errors import OptionError
from hookscope.mcp.budget import Section, fit, markdown_table, table_sections, tokens


def sections() -> list[Section]:
    return [
        Section("Status", "a store, complete. damaged: shard 2", value=100, kept=True),
        Section("Reading", "r" * 400, value=90),
        Section("Next", "n" * 100, value=30),
        Section("Table", "t" * 800, value=20),
        Section("More", "m" * 800, value=20),
    ]


def test_tokens_are_a_quarter_of_the_utf8_bytes() -> None:
    assert tokens("") == 0
    assert tokens("abcd") == 1 and tokens("abcde") == 2
    assert tokens("é" * 4) == 2  # 8 bytes


def test_a_large_budget_keeps_everything_and_lists_nothing() -> None:
    answer = fit("t", sections(), 10_000)
    assert [s.title for s in answer.sections] == ["Status", "Reading", "Next", "Table", "More"]
    assert answer.dropped == () and not answer.over_budget and "Left out" not in answer.text()
    assert answer.tokens == math.ceil(len(answer.text().encode()) / 4)


def test_lowest_value_first_the_later_first_among_equals_and_the_rest_in_order() -> None:
    full = sum(tokens(s.render()) for s in sections())
    more = tokens(sections()[4].render())
    answer = fit("t", sections(), full - more + 60)  # room for all but one table, and the note
    assert [s.title for s in answer.sections] == ["Status", "Reading", "Next", "Table"]
    assert answer.dropped == (("More", more),)
    assert answer.tokens <= full - more + 60
    small = fit("t", sections(), 185)
    assert [s.title for s in small.sections] == ["Status", "Reading"]
    assert [t for t, _ in small.dropped] == ["Next", "Table", "More"]  # listed in the tool's order
    assert small.tokens <= 185
    assert "Left out" in small.text() and "Table (~" in small.text() and "max_tokens=185" in small.text()


def test_a_kept_fact_is_never_dropped_even_over_budget() -> None:
    fact = Section("Status", "x" * 1000, value=100, kept=True)
    answer = fit("t", [fact, Section("Other", "y" * 10, value=99)], 60)
    assert [s.title for s in answer.sections] == ["Status"]
    assert answer.over_budget and answer.data()["over_budget"] is True
    assert "never left out" in answer.text()


def test_data_holds_each_kept_section_and_the_account() -> None:
    answer = fit("t", sections(), 185)
    data = answer.data()
    assert list(data["sections"]) == ["Status", "Reading"]
    assert [d["title"] for d in data["dropped"]] == ["Next", "Table", "More"]
    assert data["tokens"] == answer.tokens and data["max_tokens"] == 185


def test_a_table_is_split_so_its_head_survives() -> None:
    rows = [[str(i), str(i * i)] for i in range(25)]
    head, rest = table_sections("Squares", ["n", "n^2"], rows, value=50, first=20)
    assert head.value == 50 and rest.value == 40 and rest.title == "Squares (rows 21-25)"
    assert head.data[3] == {"n": "3", "n^2": "9"} and len(rest.data) == 5
    assert markdown_table(["a"], [["x|y"]]).splitlines()[-1] == "| x\\|y |"


def test_bad_budgets_and_twin_titles_are_refused() -> None:
    with pytest.raises(OptionError, match="max_tokens=10 is too small"):
        fit("t", sections(), 10)
    with pytest.raises(OptionError, match="unique"):
        fit("t", [Section("a", "x"), Section("a", "y")], 100)


def test_a_smaller_section_is_taken_back_when_a_larger_one_of_more_value_had_to_go() -> None:
    parts = [
        Section("Status", "ok", value=100, kept=True),
        Section("Big", "b" * 1200, value=90),  # ~300 tokens: cannot fit a budget of 200
        Section("Small", "s" * 200, value=80),  # ~50 tokens: fits once Big is gone
        Section("Tiny", "t" * 40, value=10),
    ]
    answer = fit("t", parts, 200)
    assert [s.title for s in answer.sections] == ["Status", "Small", "Tiny"]
    assert answer.dropped == (("Big", tokens(parts[1].render())),) and answer.tokens <= 200
