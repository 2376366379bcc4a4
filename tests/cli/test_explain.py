"""`hookscope explain` writes the bundle explain_prediction writes; `hookscope info` reads a bundle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import hookscope
from hookscope.cli import main
from hookscope.zoo import lenet


def test_explain_writes_the_bundle_and_info_reads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x, y = lenet.digits("test")
    torch.save(x[145:146].clone(), tmp_path / "digit.pt")
    out = tmp_path / "why"
    digit = str(tmp_path / "digit.pt")
    assert main(["explain", "lenet", digit, "--expected", str(int(y[145])), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "predicted 5, expected 9 (wrong)" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["prediction"]["labels"] == {str(i): str(i) for i in (0, 4, 5, 8, 9)}
    alone = hookscope.explain_prediction(lenet.lenet(), x[145:146], tmp_path / "api", expected=9)
    assert manifest["maps"] == alone.manifest["maps"] and manifest["ablation"] == alone.manifest["ablation"]
    assert main(["info", str(out)]) == 0
    assert "evidence bundle (hookscope.evidence.prediction.v1)" in capsys.readouterr().out
    assert main(["explain", "lenet", str(tmp_path / "digit.pt"), "--expected", "9", "--out", str(out)]) == 1
    assert "--force" in capsys.readouterr().err
