"""llms.txt and llms-full.txt are written from the documentation (scripts/llms_txt.py), never by hand.

The committed llms.txt must equal what the script writes now (run `make llms` after changing the
README, a guide or a skill); the full version holds every page and every public name's docstring.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import hookscope

ROOT = Path(__file__).resolve().parents[1]


def script() -> object:
    spec = importlib.util.spec_from_file_location("llms_txt", ROOT / "scripts" / "llms_txt.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_llms_txt_is_the_documentation_s() -> None:
    assert (ROOT / "llms.txt").read_text(encoding="utf-8") == script().llms_txt(), "run `make llms`"  # type: ignore[attr-defined]


def test_every_link_of_llms_txt_points_at_a_page_and_heading_that_exist() -> None:
    made = script()
    text = made.llms_txt()  # type: ignore[attr-defined]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    anchors = {made.anchor(title) for title, _ in made.sections(readme)}  # type: ignore[attr-defined]
    links = re.findall(r"\]\(([^)#]+)(?:#([^)]+))?\)", text)
    assert len(links) > 30
    for page, anchor in links:
        if page == "llms-full.txt" or page.startswith("https://"):
            continue
        assert (ROOT / page).is_file(), page
        assert not anchor or anchor in anchors, anchor


def test_the_full_version_holds_every_page_and_every_public_docstring() -> None:
    full = script().llms_full_txt()  # type: ignore[attr-defined]
    for page in [
        ROOT / "README.md",
        *sorted((ROOT / "docs" / "guide").glob("*.md")),
        ROOT / "docs" / "benchmarks.md",
        *sorted((ROOT / "skills").glob("*/SKILL.md")),
    ]:
        assert f"<!-- {page.relative_to(ROOT)} -->" in full
    for name in (n for n in hookscope.__all__ if not n.startswith("_")):
        assert f"\n### {name}\n" in full, name
    assert hookscope.capture.__doc__.split("\n")[0] in full
