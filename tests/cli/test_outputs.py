"""A model that returns several tensors: the command line says which one it explains, and
``--output KEY`` chooses. Oracle: the same network rewritten to return only that tensor."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from hookscope.cli import main
from hookscope.report.build import build_report

MODELS = """
import torch
from torch import nn

class Two(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                                      nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.box = nn.Linear(8, 4)
        self.classes = nn.Linear(8, 5)

    def forward(self, x):
        h = self.pool(self.features(x)).flatten(1)
        return {"box": self.box(h), "logits": self.classes(h)}

class LogitsOnly(Two):
    def forward(self, x):
        return super().forward(x)["logits"]

def two():
    return Two().eval()

def logits_only():
    return LogitsOnly().eval()
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "heads.py"
    path.write_text(MODELS)
    return path


def test_cam_explains_the_output_named_by_output_key(models: Path, tmp_path: Path) -> None:
    expected = tmp_path / "expected.png"
    assert main(["cam", f"{models}:logits_only", "random:1x3x32x32", "--target", "2", "--out", str(expected)]) == 0
    chosen = tmp_path / "chosen.png"
    assert main(["cam", f"{models}:two", "random:1x3x32x32", "--target", "2", "--out", str(chosen),
                 "--output", "logits"]) == 0  # fmt: skip
    with Image.open(expected) as a, Image.open(chosen) as b:
        assert a.tobytes() == b.tobytes()
    with pytest.warns(UserWarning, match=r"holds 2 tensors; using the first, out\['box'\]"):
        assert (
            main(["cam", f"{models}:two", "random:1x3x32x32", "--target", "2", "--out", str(tmp_path / "d.png")]) == 0
        )


def test_a_wrong_output_key_is_one_line_listing_the_keys(models: Path, tmp_path: Path, capsys) -> None:
    code = main(["cam", f"{models}:two", "random:1x3x32x32", "--out", str(tmp_path / "x.png"), "--output", "boxes"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert "no tensor at --output boxes; its keys are out['box'], out['logits']" in err
    assert not (tmp_path / "x.png").exists()


def test_the_report_says_which_output_it_explains(models: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("heads", models)
    assert spec is not None and spec.loader is not None
    heads = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heads)
    x = torch.randn(2, 3, 32, 32)
    plain = build_report(heads.two(), x, select="features.*", cam_methods=())
    assert any(r.startswith("explained: the model's output (dict) holds 2 tensors; using the first, out['box']")
               for r in plain.remarks)  # fmt: skip
    assert any(r.endswith('pass output="logits" (or another key) to choose') for r in plain.remarks)  # Python's words
    chosen = build_report(heads.two(), x, select="features.*", grads=True, output="logits")
    reference = build_report(heads.logits_only(), x, select="features.*", grads=True)
    assert not any(r.startswith("explained:") for r in chosen.remarks)
    assert [p.guesses for p in chosen.predictions] == [p.guesses for p in reference.predictions]
    assert [c.overlays for c in chosen.cams] == [c.overlays for c in reference.cams]
    assert chosen.cam_layer == reference.cam_layer == "features: the last spatial map"


def test_a_folder_of_images_is_labelled_by_file_name(tmp_path: Path, capsys) -> None:
    import skimage.data

    photos = tmp_path / "photos"
    photos.mkdir()
    for name, image in (("chelsea.jpg", skimage.data.chelsea()), ("coffee & cup.jpg", skimage.data.coffee())):
        Image.fromarray(image).save(photos / name)
    out = tmp_path / "report"
    code = main(["report", "torchvision:resnet18", str(photos), "--size", "64", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "torchvision:resnet18 on 2 images: chelsea.jpg, coffee &amp; cup.jpg" in page  # escaped, as every name
    assert "<h3>chelsea.jpg</h3>" in page and "<h3>coffee &amp; cup.jpg</h3>" in page
    assert "image 0" not in page and "image 1" not in page
