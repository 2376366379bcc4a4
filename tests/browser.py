"""What the browser tests do to a report page: open it, watch for problems, sort, zoom."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def open_page(chromium: Any, index: Path) -> tuple[Any, list[str]]:
    """The page, and a list that collects console errors, page errors and any network request."""
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url}"))
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else problems.append(f"fetch: {r.url}"))
    page.goto(index.as_uri())
    page.wait_for_load_state("load")
    return page, problems


def undecoded_images(page: Any) -> list[str]:
    """Every <img> decoded by the browser (lazy ones are made eager first); the ones that fail."""
    script = """imgs => Promise.all(imgs.filter(i => i.getAttribute("src")).map(i => { i.loading = "eager";
        return i.decode().then(() => i.naturalWidth > 0 ? null : i.alt, () => i.alt || i.src.slice(0, 40)); }))
        .then(bad => bad.filter(b => b !== null))"""
    result: list[str] = page.eval_on_selector_all("img", script)
    return result


def visible_rows(page: Any) -> list[str]:
    """The layer names of the table rows that are shown."""
    result: list[str] = page.eval_on_selector_all(
        "#layer-table tbody tr:not([hidden])", "rows => rows.map(r => r.querySelector('td:nth-child(2)').innerText)"
    )
    return result


def check_sort_and_lightbox(page: Any) -> None:
    """Two clicks on the mean column sort it descending; a picture opens the lightbox, Escape closes it."""
    page.click("#layer-table th:nth-child(5)")
    page.click("#layer-table th:nth-child(5)")
    means = page.eval_on_selector_all("#layer-table tbody td:nth-child(5)", "ts => ts.map(t => +t.dataset.v)")
    assert means == sorted(means, reverse=True)
    page.locator("img.zoom").first.click()
    assert page.is_visible("#lightbox")
    page.keyboard.press("Escape")
    assert not page.is_visible("#lightbox")


def boxes(page: Any, selector: str) -> list[dict[str, Any]]:
    """Bounding box, scroll and client widths, font size and text of every element ``selector`` matches."""
    script = """els => els.map(e => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);
        return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width, height: r.height,
                scrollWidth: e.scrollWidth, clientWidth: e.clientWidth, font: parseFloat(s.fontSize),
                color: s.color, background: s.backgroundColor, text: e.innerText, v: e.dataset.v,
                visible: e.offsetParent !== null || s.position === "fixed"}; })"""
    result: list[dict[str, Any]] = page.eval_on_selector_all(selector, script)
    return result


def pseudo_line(page: Any, selector: str, pseudo: str) -> dict[str, Any]:
    """Where the dashed line ``pseudo`` (``::before``) of the first ``selector`` is drawn, and its colour."""
    script = """(e, pseudo) => { const s = getComputedStyle(e, pseudo), r = e.getBoundingClientRect();
        return {left: r.left + parseFloat(s.left), color: s.borderLeftColor, style: s.borderLeftStyle,
                trackLeft: r.left, trackWidth: r.width}; }"""
    result: dict[str, Any] = page.eval_on_selector(selector, script, pseudo)
    return result


def overlapping(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two boxes of ``boxes`` share any area."""
    return min(a["right"], b["right"]) - max(a["left"], b["left"]) > 0.5 and (
        min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 0.5
    )
