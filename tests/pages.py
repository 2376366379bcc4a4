"""The documentation's pages and their code blocks, as the tests that run them read them.

A page is README.md or any ``docs/**/*.md``. Its ```python blocks run in order, in one temporary folder
per page (tests/test_api.py), and its ``hookscope ...`` shell lines run too (tests/test_readme_commands.py).
The fence rule: a second word after ``python`` means "not run in the test venv":

- ```python vllm: run by ``make test-vllm`` (tests/serving/);
- ```python norun: a peer that is not a test dependency, or a GPU-only line; its first line says why,
  ``# not run: <reason>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)(?:[ \t]+(\S+))?[^\n]*\n(.*?)^```", re.M | re.S)
NOT_RUN = ("vllm", "norun")  # the second words a ```python fence may carry


def pages() -> list[Path]:
    """README.md, then every Markdown page under docs/, sorted; a build's folders (``_build``, ``_static``,
    any ``_`` or ``.`` name) are no pages."""
    docs = ROOT / "docs"
    built = ("_", ".")
    found = (p for p in docs.rglob("*.md") if not any(d.startswith(built) for d in p.relative_to(docs).parts))
    return [README, *sorted(found)]


def name(page: Path) -> str:
    """A page as its path from the repository's root (``docs/guide/capture.md``)."""
    return page.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: Path
    index: int  # the block's place among its page's blocks of the same language (python, or shell)
    lang: str
    word: str  # the fence's second word ("" when none)
    body: str

    @property
    def id(self) -> str:
        return f"{name(self.page)}:{self.lang}{self.index}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    text = page.read_text(encoding="utf-8")
    found: list[Block] = []
    for match in FENCE.finditer(text):
        lang, word, body = match.group(1), match.group(2) or "", match.group(3)
        found.append(Block(page, sum(b.lang == lang for b in found), lang, word, body))
    return found


def python_blocks(page: Path, word: str = "") -> list[Block]:
    """The ```python blocks of ``page`` whose fence's second word is ``word`` ("": the blocks run here)."""
    return [b for b in blocks(page) if b.lang == "python" and b.word == word]


def runnable() -> list[Block]:
    """Every ```python block run in the test venv, page by page, in order."""
    return [b for page in pages() for b in python_blocks(page)]


NOT_LITERAL = ("~0.98", "what `hookscope info")  # a claim about the output, not the output itself
CLAIM = re.compile(r"^[ \t]*print\(.*\)[ \t]+#[ \t]+(.+)$", re.M)


def claims(block: Block) -> list[str]:
    """What the block's ``print(...)  # what it prints`` lines claim, each a line of its output."""
    return [m.group(1) for m in CLAIM.finditer(block.body) if not m.group(1).startswith(NOT_LITERAL)]


def as_pattern(claim: str) -> str:
    """A claim as a regular expression: ``...`` stands for anything."""
    return ".*?".join(re.escape(part) for part in claim.split("...")).strip()
