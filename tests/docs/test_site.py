"""The documentation site (docs/, ``make docs``): one strict build per session, and what it must hold.

The build is Sphinx's with ``-W --keep-going -n``: any warning fails it, a broken internal link or
an unresolved reference included. On its output: every public name has an API entry whose
parameter table lists exactly the signature's parameters; every error and warning class has its
entry on the error index, and the index names no class that is gone; llms.txt and llms-full.txt
come out of the build; no page loads anything from another site; and in Chromium the index and
an API page fit 1280 and 400 px wide with no horizontal scrolling.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup, Tag

import hookscope
import hookscope.errors
from tests.browser import open_page
from tests.test_docstrings import CALLABLES, DATACLASSES, PUBLIC, parameters

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BUILD_LIMIT_S = 60  # the whole build, on a CI runner's 2 cores
ERRORS = sorted(
    n for n, o in vars(hookscope.errors).items() if isinstance(o, type) and o.__module__ == "hookscope.errors"
)
TILDE = re.compile(r"~[A-Za-z_][\w.]*")  # a type's cross-reference shortening, shown as written
EXTERNAL = re.compile(
    r"""(<script[^>]*\ssrc=["']?|<link[^>]*\shref=["']?|@import\s+(url\()?["']?|url\(["']?)(https?:)?//"""
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built once, strictly, into a temporary folder (the API pages are written into docs/api/)."""
    out = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-n", "-q"]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, "-d", str(out / "doctrees"), str(DOCS), str(out / "html")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    took = time.perf_counter() - start
    assert done.returncode == 0, f"the strict build failed:\n{done.stderr[-6000:]}"
    assert "WARNING" not in done.stderr and "ERROR" not in done.stderr, done.stderr[-6000:]
    # 3x slack for a loaded machine (the report says the figure of `make docs` on an idle one)
    assert took < BUILD_LIMIT_S * 3, f"the build took {took:.0f} s"
    return out / "html"


def described(site: Path) -> list[BeautifulSoup]:
    """The built pages that describe objects (the API pages, the error index), parsed."""
    texts = (p.read_text(encoding="utf-8") for p in site.rglob("*.html"))
    return [BeautifulSoup(text, "html.parser") for text in texts if "sig-object" in text]


@pytest.fixture(scope="module")
def entries(site: Path) -> dict[str, Tag]:
    """Every documented object's description (its ``<dd>``) by its id: ``hookscope.capture``, ``hookscope.Run.plot``."""
    found: dict[str, Tag] = {}
    for soup in described(site):
        for dt in soup.select("dt.sig-object[id]"):
            dd = dt.find_next_sibling("dd")
            assert isinstance(dd, Tag)
            found[str(dt["id"])] = dd
    return found


def listed(dd: Tag, *fields: str) -> list[str] | None:
    """The names the entry's own field (``Parameters``, ``Variables``) lists, None when it has no such field."""
    for field_list in dd.find_all("dl", class_="field-list", recursive=False):
        for name in field_list.find_all("dt", recursive=False):
            if name.get_text(strip=True).rstrip(":") in fields:
                body = name.find_next_sibling("dd")
                assert isinstance(body, Tag)
                items = body.find_all("li") or [body]
                return [strong.get_text() for item in items if (strong := item.find("strong")) is not None]
    return None


def test_every_public_name_has_an_api_entry_with_its_parameters(entries: dict[str, Tag]) -> None:
    """Functions, classes and their methods (tests/test_docstrings.py's walk): an entry whose table of
    parameters (a dataclass's: its variables) names exactly what the signature takes, in order."""
    found = entries
    wrong = []
    for name, (fn, bound, _) in CALLABLES.items():
        dd = found.get(f"hookscope.{name}")
        if dd is None:
            wrong.append(f"{name}: no entry")
            continue
        if fn.__name__ == "no_constructor":  # an error class or a protocol: nothing to call
            continue
        expected = parameters(fn, bound=bound)
        got = listed(dd, "Parameters", "Variables") if name in DATACLASSES else listed(dd, "Parameters")
        if expected != (got or []):
            wrong.append(f"{name}: table {got} != signature {expected}")
    others = [
        n
        for n in hookscope.__all__
        if n not in PUBLIC and not n.startswith("_") and n not in ("compare", "edits", "zoo")
    ]
    wrong += [f"{n}: no entry" for n in others if f"hookscope.{n}" not in found]
    # a type shows its short name, never "~collections.abc.Iterable" (docs/_ext/apipages.literal_tail)
    for name, dd in found.items():
        signature, fields = dd.find_previous_sibling("dt"), dd.find_all("dl", class_="field-list", recursive=False)
        shown = " ".join(part.get_text() for part in [signature, *fields] if part is not None)
        wrong += [f"{name}: {tilde!r} shown" for tilde in sorted(set(TILDE.findall(shown)))]
    assert len(CALLABLES) > 150 and not wrong, "\n".join(wrong)


def test_the_error_index_has_every_error_class_and_no_other(entries: dict[str, Tag]) -> None:
    """docs/errors.md: a section per class of hookscope.errors (its docstring, a cause, the fix), and none
    for a class that is gone."""
    text = (DOCS / "errors.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (\w+)$", text, flags=re.M)
    assert sorted(headings) == ERRORS
    for name in ERRORS:
        section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert (
            f".. autoexception:: hookscope.{name}" in section
            and "**Typical cause**" in section
            and "**Fix**" in section
        ), name
    assert all(f"hookscope.{name}" in entries for name in ERRORS)
    assert all(name in hookscope.__all__ for name in ERRORS)


def test_llms_txt_and_the_full_version_come_out_of_the_build(site: Path) -> None:
    """llms.txt links every page (relative, so the site works from a folder) and the skills; llms-full.txt
    holds every page, the skills and every public name's docstring."""
    short = (site / "llms.txt").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)]+)\)", short)
    built = {p.relative_to(site).as_posix() for p in site.rglob("*.html")} - {"genindex.html", "search.html"}
    assert {"index.html", "errors.html", "api/index.html", "gallery.html", "migrate/captum.html"} <= built <= set(links)
    assert all((site / link).is_file() for link in links), links
    skills = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "skills").glob("*/SKILL.md"))
    assert sorted(link for link in links if link.startswith("skills/")) == skills
    full = (site / "llms-full.txt").read_text(encoding="utf-8")
    for name in (n for n in hookscope.__all__ if not n.startswith("_")):
        assert f"\n### {name}\n" in full, name
    assert inspect.cleandoc(hookscope.capture.__doc__ or "").split("\n")[0] in full
    assert "# Errors and warnings" in full and all(f"<!-- {s} -->" in full for s in skills)


def test_no_page_loads_anything_from_another_site(site: Path) -> None:
    """No script, stylesheet, font or picture from the network: the site opens offline (furo bundles its own)."""
    offending = []
    for path in [*site.rglob("*.html"), *site.rglob("*.css"), *site.rglob("*.js")]:
        text = path.read_text(encoding="utf-8", errors="replace")
        offending += [f"{path.relative_to(site)}: {m.group(0)}" for m in EXTERNAL.finditer(text)]
    assert offending == []


@pytest.mark.parametrize("page", ["index.html", "api/core.html"])
def test_pages_fit_a_desktop_and_a_phone_in_chromium(site: Path, page: str, chromium: Any, tmp_path: Path) -> None:
    """At 1280 and 400 px wide: no horizontal scrolling, no failed or outside request, no script error."""
    view, problems = open_page(chromium, site / page)
    try:
        for width in (1280, 400):
            view.set_viewport_size({"width": width, "height": 900})
            view.screenshot(path=str(tmp_path / f"{page.replace('/', '-')}-{width}.png"), full_page=False)
            scroll, inner = view.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            assert scroll <= inner, f"{page} at {width} px: {scroll} px wide"
        assert problems == []
    finally:
        view.close()


# Each migration page, and whether its peer is a test dependency (so that both sides run).
PEERS = {"captum": True, "pytorch-grad-cam": True, "torchcam": True, "transformerlens": True}
PEERS |= {"torchlens": False, "nnsight": False}


@pytest.mark.parametrize(("page", "runs"), PEERS.items())
def test_a_migration_page_checks_both_sides_where_both_run(page: str, runs: bool) -> None:
    """A peer that is a test dependency: its result and hookscope's compared in a block that runs. One that
    is not: its side in ```python norun blocks that say why, hookscope's side run."""
    text = (DOCS / "migrate" / f"{page}.md").read_text(encoding="utf-8")
    run = re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)
    shown = re.findall(r"^```python norun\n(.*?)^```", text, flags=re.M | re.S)
    assert run, page
    if runs:
        assert any("torch.testing.assert_close(" in block for block in run) and not shown, page
    else:
        assert shown and all(b.startswith(f"# not run: {page} is not a test dependency") for b in shown), page


def test_every_migration_page_is_checked() -> None:
    assert sorted(PEERS) == sorted(p.stem for p in (DOCS / "migrate").glob("*.md") if p.stem != "index")
