"""build_report(faithfulness=True), `hookscope report --faithfulness`: AUCs beside each CAM, the curves below."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import hookscope
from hookscope.cli import main


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    ).eval()  # fmt: skip


def test_each_cam_gets_its_aucs_and_the_page_its_curves() -> None:
    model, x = _cnn(), torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(5))
    report = hookscope.build_report(model, x, cam_methods=("gradcam", "layercam"), faithfulness=True, graph=False)
    heats = {m: hookscope.cam(model, x, m) for m in ("gradcam", "layercam")}  # the layer the report picks
    alone = hookscope.faithfulness(model, x, heats, metrics=("deletion", "insertion"))
    for view in report.cams:
        for (method, _), badge in zip(view.overlays, view.badges, strict=True):
            d, i = alone[method].deletion_auc[view.image], alone[method].insertion_auc[view.image]
            assert badge == f"deletion {d:.2f} · insertion {i:.2f}"
    assert [s.id for s in report.sections] == ["faithfulness"]
    page = hookscope.render_html(report)
    assert "Is the map faithful?" in page
    assert report.cams[0].badges[0] in page
    assert hookscope.build_report(model, x, graph=False).cams[0].badges == ()  # off by default


def test_the_command_line_flag(tmp_path: Path, capsys: object) -> None:
    assert main(["report", "lenet", "random:1x1x32x32", "--faithfulness", "--out", str(tmp_path / "r")]) == 0
    page = (tmp_path / "r" / "index.html").read_text()
    assert "Is the map faithful?" in page
    assert "deletion 0." in page or "deletion 1." in page
