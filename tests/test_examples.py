"""examples/train_lenet_watch.py runs as docs/guide/watch.md says: it trains, prints the history and alerts, and
writes a store that ``hookscope info`` reads and a training report."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import hookscope

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_watch_example_trains_and_writes_its_store_and_report(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "train_lenet_watch.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    accuracy = re.findall(r"step (\d+): loss [\d.]+, test accuracy ([\d.]+)%", done.stdout)
    assert [int(step) for step, _ in accuracy] == [100, 200, 300]
    assert float(accuracy[-1][1]) > 80  # LeNet learns the digits: the watch did not break training
    assert done.stdout.strip().splitlines()[-1] == str(tmp_path / "lenet-report" / "index.html")
    run = hookscope.load(tmp_path / "lenet.hookscope")
    assert run.history("fc1").steps == list(range(0, 300, 10))
    page = (tmp_path / "lenet-report" / "index.html").read_text(encoding="utf-8")
    assert "fc1" in page and "data:image/png;base64," in page and "<script src" not in page


def _example(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "default", "drawn"),
    [
        ("pictures", "pictures", ""),
        ("rollout_digits", "rollout-digits", "rollout.jpg"),
        ("compare_pictures", "compare", "cka.png"),
        ("graph_picture", "graph", "graph.png"),
        ("steer_picture", "steer", "steer_sweep.png"),
    ],
)
def test_the_picture_examples_leave_docs_images_alone_unless_asked(
    name: str, default: str, drawn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as a user would, they write into a folder of their own; the tracked docs/images only with --docs."""
    example = _example(name)
    docs = EXAMPLES.parent / "docs" / "images"
    mine = EXAMPLES / "output" / default  # the ignored folder every example writes under
    for argv, expected in (([], mine), (["--out", "elsewhere"], Path("elsewhere")), (["--docs"], docs)):
        monkeypatch.setattr(sys, "argv", [name, *argv])
        assert example.where() == (expected / drawn if drawn else expected)


def test_the_examples_write_under_one_ignored_folder() -> None:
    """Whatever an example writes by default lands in examples/output/, which git ignores."""
    ignored = subprocess.run(["git", "check-ignore", "-q", str(EXAMPLES / "output" / "runs" / "lenet.hookscope")],
                             cwd=EXAMPLES.parent, check=False)  # fmt: skip
    assert ignored.returncode == 0
    for path in EXAMPLES.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"""default=["'](?!-)""", text) or 'OUTPUT / "' in text, path.name
        assert '"runs"' not in text or 'output" / "runs"' in text, path.name
