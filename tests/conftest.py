"""Shared fixtures: a headless Chromium for the report's browser tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """Debian's Chromium through Playwright; skipped where missing, but a failure under CI=true."""
    path = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if path is None or sync_playwright is None:
        why = "no chromium on PATH (apt-get install -y chromium)" if path is None else "playwright is not installed"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"browser tests need Chromium under CI: {why}")
        pytest.skip(why)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=path,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        yield browser
        browser.close()
