"""Shared fixtures: a headless Chromium for the report's browser tests. The trackers the sinks' tests run
(W&B, trackio) and matplotlib's cache write into one temporary folder, removed at the end, not into the
home folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TRACKER_FOLDERS = {  # where each tracker writes by default (~/.cache/wandb, ~/.config/wandb, ...): redirected
    "WANDB_DIR": "wandb",
    "WANDB_CACHE_DIR": "wandb-cache",
    "WANDB_CONFIG_DIR": "wandb-config",
    "WANDB_DATA_DIR": "wandb-data",
    "WANDB_ARTIFACT_DIR": "wandb-artifacts",
    "TRACKIO_DIR": "trackio",  # read when trackio is first imported: before any test module
    "MPLCONFIGDIR": "matplotlib",  # matplotlib's font cache (~/.cache/matplotlib), read when it is first imported
}
_TRACKERS = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    home = Path(tempfile.mkdtemp(prefix="hookscope-trackers-"))
    config.stash[_TRACKERS] = home
    for variable, folder in TRACKER_FOLDERS.items():
        os.environ[variable] = str(home / folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    home = config.stash.get(_TRACKERS, None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)


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
