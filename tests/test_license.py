"""The licence pyproject declares is the LICENSE file beside it, and the wheel carries that file.

The oracle is the MIT licence's own text: its grant and its warranty disclaimer, word for word.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_declares_mit_and_ships_the_license_file() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]  # hatchling copies it into the wheel's .dist-info/licenses/
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the hookscope authors\n")
    flat = " ".join(text.split())
    assert "Permission is hereby granted, free of charge, to any person obtaining a copy of this software" in flat
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in flat
    assert "The above copyright notice and this permission notice shall be included in all copies" in flat
