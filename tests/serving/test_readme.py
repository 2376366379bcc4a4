"""docs/guide/serving.md's vLLM examples run as written (in its own process) and prints what its comments say.

The main suite leaves the block out (``python vllm``, not ``python``: tests/test_api.py and
tests/test_readme_commands.py read ``python`` blocks only); this is the one test that runs it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from .tiny import needs_vllm, result

needs_vllm()

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "serving.md"


def test_the_vllm_example_prints_what_its_comments_say(engines: dict[str, subprocess.Popen[str]]) -> None:
    blocks = re.findall(r"```python vllm\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    claims = [c for block in blocks for c in re.findall(r"^print\(.*\)\s+# (.*)$", block, flags=re.M)]
    assert len(blocks) >= 2 and len(claims) >= 5  # the capture and edit example, the store one
    printed = result(engines["readme"])["printed"]
    for claim in claims:
        assert claim in printed, (claim, printed)
