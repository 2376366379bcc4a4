"""Every relative link of the documentation (README.md and each docs/**/*.md page) reaches a file that exists,
and a link to a heading (``page.md#anchor``) a heading that exists: as GitHub renders the pages, and as the
site's strict build (MyST, ``myst_heading_anchors``) resolves them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import pages

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
GENERATED = Path(__file__).resolve().parents[1] / "docs" / "api"  # tests/docs/test_site.py builds and checks them


def prose(page: Path) -> str:
    """The page without its fenced blocks and inline code, where a bracket is code, not a link."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(title) for title in re.findall(r"^#{1,6} (.*)$", prose(page), flags=re.M)}


@pytest.mark.parametrize("page", pages.pages(), ids=pages.name)
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, heading = target.partition("#")
        reached = (page.parent / path).resolve() if path else page
        if GENERATED in reached.parents:  # the API pages: written by the build, checked by its strict run
            continue
        assert reached.exists(), f"{pages.name(page)}: {target} reaches no file"
        if heading and reached.suffix == ".md":
            assert heading in anchors(reached), f"{pages.name(page)}: {target} reaches no heading"
