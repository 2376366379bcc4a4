"""The agent skills in skills/: each ends in a validation checklist of commands, run here on real bundles.

Every check must pass on a sound bundle (a misclassified LeNet digit; a NaN caught by nan_guard with a
reproducer) and the soundness check must fail once a listed file of the bundle is gone, so the
checklist can fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hookscope
from hookscope.zoo import lenet

ROOT = Path(__file__).resolve().parents[2]
SKILLS = {path.parent.name: path for path in sorted((ROOT / "skills").glob("*/SKILL.md"))}
MODEL = """\
from torch import nn


class Standardize(nn.Module):
    def forward(self, x):
        return (x - x.mean(0)) / x.std(0)


def build():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), Standardize(), nn.Linear(8, 1))
"""


def checklist(skill: str) -> list[str]:
    """The commands of the skill's last section, one per checklist item (the last `code` of the line)."""
    text = SKILLS[skill].read_text(encoding="utf-8")
    front = dict(line.split(": ", 1) for line in text.split("---")[1].strip().splitlines())
    assert front["name"] == skill and front["description"]
    last = text.rsplit("## ", 1)[1]
    assert last.startswith("Validation checklist")
    items = [line for line in last.splitlines() if line.startswith("- [ ] ")]
    return [re.findall(r"`([^`]+)`", item)[-1] for item in items]


def run(command: str, bundle: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = cwd / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "python"  # the test's interpreter (a symlink would leave its virtual environment)
    if not wrapper.exists():
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        wrapper.chmod(0o755)
    src = str(Path(hookscope.__file__).resolve().parents[1])
    env = {**os.environ, "BUNDLE": str(bundle), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([src, str(cwd)])}  # fmt: skip
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def prediction(tmp_path_factory: pytest.TempPathFactory) -> Path:
    x, y = lenet.digits("test")
    out = tmp_path_factory.mktemp("skills") / "why"
    hookscope.explain_prediction(lenet.lenet(), x[145:146], out, expected=int(y[145]))
    return out


@pytest.fixture(scope="module")
def alert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("skills")
    (home / "skill_nan_model.py").write_text(MODEL)
    sys.path.insert(0, str(home))
    try:
        from skill_nan_model import build  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(home))
    torch.manual_seed(0)
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train() -> None:
        with hookscope.nan_guard(model, opt, evidence=home / "nan", factory="skill_nan_model:build"):
            for x in [torch.randn(16, 4) for _ in range(2)] + [torch.ones(16, 4)]:
                loss = model(x).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()

    with pytest.raises(hookscope.NonFiniteError):
        train()
    return home / "nan"


def test_there_are_the_two_skills() -> None:
    """The site's llms.txt links them (tests/docs/test_site.py)."""
    assert set(SKILLS) == {"debug-wrong-prediction", "triage-training-alert"}


def test_every_check_of_the_prediction_skill_passes_on_a_sound_bundle(prediction: Path, tmp_path: Path) -> None:
    commands = checklist("debug-wrong-prediction")
    assert len(commands) == 4
    for command in commands:
        done = run(command, prediction, tmp_path)
        assert done.returncode == 0, (command, done.stdout[-500:], done.stderr[-800:])


def test_every_check_of_the_alert_skill_passes_and_the_reproducer_raises(alert: Path, tmp_path: Path) -> None:
    commands = checklist("triage-training-alert")
    assert hookscope.Evidence.read(alert).manifest["reproducer"]["script"] == "reproduce.py"  # so the check runs it
    for command in commands:
        done = run(command, alert, alert.parent)
        assert done.returncode == 0, (command, done.stdout[-500:], done.stderr[-800:])


def test_the_soundness_check_fails_on_a_damaged_bundle(prediction: Path, tmp_path: Path) -> None:
    copy = tmp_path / "damaged"
    shutil.copytree(prediction, copy)
    (copy / "logits.npy").unlink()
    done = run(checklist("debug-wrong-prediction")[0], copy, tmp_path)
    assert done.returncode != 0 and "logits.npy" in done.stderr
