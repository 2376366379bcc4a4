"""Write llms.txt and llms-full.txt (https://llmstxt.org) from the documentation, so they cannot drift from it.

``llms.txt``: the README's opening, then one link per README section and per page under docs/ (the
user guide, docs/guide/, and the others) with its first sentence, then the assistant's tools and
skills. ``llms-full.txt``: the README, every page and skill, and the API reference (every public
name's signature and docstring, as the ``api`` tool gives it), in one file. Run
``python scripts/llms_txt.py [OUT_DIR]`` (``make llms``);
tests/test_llms_txt.py checks that the committed llms.txt is what this writes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDES = sorted(  # every page under docs/ but a build's folders (_build, _static...) and the generated API pages
    p
    for p in (ROOT / "docs").rglob("*.md")
    if not any(part.startswith(("_", ".")) or part == "api" for part in p.relative_to(ROOT / "docs").parts)
)
SKILLS = sorted((ROOT / "skills").glob("*/SKILL.md"))
LONGEST = 220  # characters of a link's description


def sections(markdown: str) -> list[tuple[str, str]]:
    """``(title, body)`` of each ``## `` section, code blocks skipped when looking for headings."""
    found: list[tuple[str, list[str]]] = []
    fenced = False
    for line in markdown.splitlines():
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("## "):
            found.append((line[3:].strip(), []))
        elif found:
            found[-1][1].append(line)
    return [(title, "\n".join(body)) for title, body in found]


def first_sentence(body: str) -> str:
    """The first sentence of a section's prose (code, headings, pictures and tables skipped)."""
    prose = []
    fenced = False
    for line in body.splitlines():
        fenced ^= line.startswith("```")
        if fenced or line.startswith(("```", "#", "!", "|", "<", "- ", "    ")):
            if prose:
                break
            continue
        if line.strip():
            prose.append(line.strip())
        elif prose:
            break
    text = " ".join(prose)
    end = re.search(r"(?<=[a-z0-9)`'][.!?])\s+(?=[A-Z`])", text)  # a sentence's end, not "e.g. x" nor "1.5"
    sentence = (text[: end.start()] if end else text).rstrip(":;")
    if len(sentence) > LONGEST:
        sentence = sentence[: sentence.rfind(" ", 0, LONGEST)].rstrip(",;:(") + " ..."
    return sentence


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def opening(readme: str) -> tuple[str, str]:
    """The README's first paragraph (the summary) and the one after it."""
    paragraphs = [p.strip() for p in readme.split("\n## ", 1)[0].split("\n\n")[1:] if p.strip()]
    return " ".join(paragraphs[0].split()), " ".join(paragraphs[1].split()) if len(paragraphs) > 1 else ""


def llms_txt() -> str:
    """The text of llms.txt."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    summary, detail = opening(readme)
    lines = ["# hookscope", "", f"> {summary}", "", detail, "", "## Docs", ""]
    for title, body in sections(readme):
        lines.append(f"- [{title}](README.md#{anchor(title)}): {first_sentence(body)}")
    lines += ["", "## Guides", ""]
    for guide in GUIDES:
        text = guide.read_text(encoding="utf-8")
        title = text.splitlines()[0].lstrip("# ").strip()
        body = text.split("\n", 1)[1]
        lines.append(f"- [{title}]({guide.relative_to(ROOT).as_posix()}): {first_sentence(body)}")
    lines += [
        "", "## Tools for assistants", "",
        "- MCP server: `python -m hookscope.mcp` (`pip install 'hookscope[mcp]'`) serves read-only tools over "
        "stores, watch runs and evidence bundles, each answer within `max_tokens`; `hookscope tool` runs the same "
        "tools on the command line.",
        *(f"- [{_skill_name(s)}]({s.relative_to(ROOT)}): {_skill_description(s)}" for s in SKILLS),
        "", "## Optional", "",
        "- [llms-full.txt](llms-full.txt): the README, every guide, the skills and the API reference in one file",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def llms_full_txt() -> str:
    """The text of llms-full.txt: every page, then the API reference from the docstrings."""
    from hookscope.mcp.api_map import api

    pages = [ROOT / "README.md", *GUIDES, *SKILLS]
    parts = [f"<!-- {page.relative_to(ROOT)} -->\n{page.read_text(encoding='utf-8').strip()}\n" for page in pages]
    import hookscope

    names = [n for n in hookscope.__all__ if not n.startswith("_")]
    reference = ["# API reference", "", *("#" + api(name)[0].render() for name in names)]
    return "\n".join([*parts, "\n".join(reference)])


def _skill_name(path: Path) -> str:
    return _front(path).get("name", path.parent.name)


def _skill_description(path: Path) -> str:
    return _front(path).get("description", "")


def _front(path: Path) -> dict[str, str]:
    """The YAML front matter of a skill (``key: value`` lines between ``---``)."""
    text = path.read_text(encoding="utf-8")
    head = text.split("---", 2)[1] if text.startswith("---") else ""
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in head.splitlines()) if v}


def main(out: Path) -> None:
    (out / "llms.txt").write_text(llms_txt(), encoding="utf-8")
    (out / "llms-full.txt").write_text(llms_full_txt(), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
