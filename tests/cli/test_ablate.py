"""hookscope report --ablate SITE:EDIT: the syntax, one-line errors, and the prediction before and
after, side by side, against the network edited by hand."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from hookscope.cli import main
from hookscope.cli.ablate import ablation_spec

MODEL = """import torch

def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(4, 3))
"""


@pytest.mark.parametrize(
    ("spec", "site", "edit"),
    [
        ("layer4:channels=3,17", "layer4", "edits.zero(channels=[3, 17])"),
        ("fc:units=0", "fc", "edits.zero(units=[0])"),
        ("encoder.layer.3:positions=0,1", "encoder.layer.3", "edits.zero(positions=[0, 1])"),
        (":blocks:zero", ":blocks", "edits.zero()"),
        ("re:layer[12]:mean", "re:layer[12]", "edits.mean(batch)"),
        ("layer2.0.conv1:scale=0.5", "layer2.0.conv1", "edits.scale(0.5)"),
    ],
)
def test_the_syntax(spec: str, site: str, edit: str) -> None:
    parsed_site, op = ablation_spec(spec)
    assert (parsed_site, repr(op)) == (site, edit)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("layer4", r"--ablate takes SITE:EDIT \(SITE:channels=I,J \|"),
        ("layer4:", r"--ablate takes SITE:EDIT"),
        ("layer4:chanels=3", r"unknown edit 'chanels=3'; write one of SITE:channels=I,J"),
        ("layer4:channels=3,x", r"channels= takes integers separated by commas, e.g. channels=3,17"),
        ("layer4:scale=big", r"scale= takes a number, got 'big'"),
        ("layer4:zero=1", r"unknown edit 'zero=1'"),
    ],
)
def test_a_spec_that_does_not_parse_is_one_line(spec: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        ablation_spec(spec)


def test_the_report_shows_the_prediction_before_and_after(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "net.py").write_text(MODEL)
    torch.manual_seed(1)
    x = torch.randn(1, 3, 8, 8)
    torch.save(x, tmp_path / "x.pt")
    out = tmp_path / "report"
    argv = ["report", f"{tmp_path / 'net.py'}:build", str(tmp_path / "x.pt"), "--select", "0", "--top-k", "3"]
    assert main([*argv, "--ablate", "0:channels=1,2", "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    section = page[page.index('<section id="ablation">') :]
    section = section[: section.index("</section>")]
    torch.manual_seed(0)
    conv, linear = torch.nn.Conv2d(3, 4, 3), torch.nn.Linear(4, 3)
    with torch.no_grad():
        h = conv(x)
        before = linear(F.relu(h).mean((2, 3))).softmax(1)[0]
        h[:, [1, 2]] = 0  # the ablation, by hand
        after = linear(F.relu(h).mean((2, 3))).softmax(1)[0]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", section)
    first = cells.index("image 0")
    rows = [cells[first + 6 * r : first + 6 * (r + 1)] for r in range(3)]
    for rank, row in enumerate(rows):
        b, a = before.topk(3), after.topk(3)
        assert row[2:] == [f"class {int(b.indices[rank])}", f"{100 * float(b.values[rank]):.1f}%",
                           f"class {int(a.indices[rank])}", f"{100 * float(a.values[rank]):.1f}%"]  # fmt: skip
    assert "edits.zero(channels=[1, 2])" in section and 'href="#ablation"' in page
    bad = main([*argv, "--ablate", "9:zero", "--out", str(tmp_path / "r2")])
    assert bad == 1 and "'9' matched no module" in capsys.readouterr().err
