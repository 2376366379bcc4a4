"""The command line: subcommands, exit codes, one-line errors, nothing half-written."""

from __future__ import annotations

from pathlib import Path

import pytest
import skimage.data
import torch
from PIL import Image

from hookscope.cli import main


@pytest.fixture
def cat_jpg(tmp_path: Path) -> Path:
    path = tmp_path / "cat.jpg"
    Image.fromarray(skimage.data.chelsea()).save(path)
    return path


@pytest.fixture
def broken_model(tmp_path: Path) -> Path:
    source = tmp_path / "broken.py"
    source.write_text(
        "import torch\n\n"
        "class Bad(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        raise ValueError('shapes do not line up')\n\n"
        "def build():\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), Bad())\n"
    )
    return source


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_shows_examples(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "hookscope demo --model lenet" in out
    assert "hookscope cam efficientnet-lite0 photo.jpg" in out
    for command in ("list", "report", "cam", "demo"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "example:" in capsys.readouterr().out


def test_usage_errors_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["cam"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["cam", "lenet", "x.jpg", "--method", "gradcamm"])
    assert info.value.code == 2
    assert "invalid choice: 'gradcamm'" in capsys.readouterr().err


def test_list_prints_every_module_with_its_output_shape(capsys) -> None:
    code, out, _ = run(capsys, "list", "tests.models:LeNet", "--input", "random:1x3x32x32")
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()}
    assert rows["conv1"][1:3] == ["Conv2d", "456"]
    assert " ".join(rows["conv1"][3:]) == "(1, 6, 28, 28)"
    assert " ".join(rows["fc3"][3:]) == "(1, 10)"
    assert rows["(model)"][1] == "LeNet"


def test_cam_writes_a_picture(capsys, cat_jpg: Path, tmp_path: Path) -> None:
    out = tmp_path / "cam.png"
    code, printed, _ = run(capsys, "cam", "efficientnet-lite0", str(cat_jpg), "--target", "285", "--out", str(out))
    assert code == 0
    assert printed.strip() == str(out)
    with Image.open(out) as drawn:
        assert drawn.size == (224, 224)
    code, _, err = run(capsys, "cam", "efficientnet-lite0", str(cat_jpg), "--out", str(out), "--panel")
    assert code == 1
    assert err.strip().endswith("cam.png already exists; pass --force to replace it, or pick another path")
    assert run(capsys, "cam", "efficientnet-lite0", str(cat_jpg), "--out", str(out), "--panel", "--force")[0] == 0
    with Image.open(out) as drawn:
        assert drawn.size[0] > 3 * 224


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["list", "efficientnet-lite"], "unknown model 'efficientnet-lite' (did you mean 'efficientnet-lite0'?)"),
        (["cam", "efficientnet-lite0", "missing.jpg"], "input 'missing.jpg' does not exist"),
        (["cam", "efficientnet-lite0", "{cat}", "--layer", "_blocks.99"], "'_blocks.99' matched no module"),
        (["cam", "efficientnet-lite0", "{cat}", "--target", "1000"], "target 1000 is not a class"),
        (["list", "tests.models:LeNet", "--weights", "nope.pt"], "weights file 'nope.pt' does not exist"),
    ],
)
def test_errors_are_one_line_on_stderr_with_exit_1(capsys, cat_jpg: Path, tmp_path: Path, argv, message) -> None:
    argv = [a.replace("{cat}", str(cat_jpg)) for a in argv]
    code, _, err = run(capsys, *argv, "--out", str(tmp_path / "x.png")) if argv[0] == "cam" else run(capsys, *argv)
    assert code == 1
    assert err.count("\n") == 1
    assert err.startswith("hookscope: error: ")
    assert message in err
    assert not (tmp_path / "x.png").exists()


def test_a_model_whose_forward_raises_names_the_module(capsys, broken_model: Path) -> None:
    code, _, err = run(capsys, "list", f"{broken_model}:build", "--input", "random:1x3x8x8")
    assert code == 1
    assert "the model's forward raised ValueError: shapes do not line up (inside module '2'" in err
    assert "the last module to finish was '1'" in err
    assert err.count("\n") == 1


def test_debug_shows_the_traceback(capsys) -> None:
    code, _, err = run(capsys, "list", "efficientnet-lite", "--debug")
    assert code == 1
    assert "Traceback (most recent call last)" in err


def test_report_end_to_end_refuses_to_overwrite_and_names_bad_layers(capsys, tmp_path: Path, cat_jpg: Path) -> None:
    out = tmp_path / "report"
    argv = ["report", "efficientnet-lite0", str(cat_jpg), "--select", "_blocks.1*", "--grads", "--out", str(out)]
    code, printed, _ = run(capsys, *argv)
    assert code == 0
    assert printed.strip() == str(out / "index.html")
    assert "Egyptian Mau" in (out / "index.html").read_text()
    before = (out / "index.html").stat().st_mtime_ns
    code, _, err = run(capsys, *argv)
    assert code == 1
    assert "already exists; pass --force to replace it (the hookscope report there)" in err
    assert (out / "index.html").stat().st_mtime_ns == before
    lenet = ["report", "tests.models:LeNet", "random:1x3x32x32"]
    code, _, err = run(capsys, *lenet, "--select", "conv9", "--out", str(tmp_path / "r2"))
    assert code == 1
    assert "'conv9' matched no module of LeNet (8 modules); closest: 'conv2', 'conv1'" in err
    assert not (tmp_path / "r2").exists()
    torch.manual_seed(0)  # the random LeNet's CAM is not flat (a flat one warns), whatever ran before
    assert run(capsys, *lenet, "--out", str(tmp_path / "r3"))[0] == 0


def test_python_dash_m_works() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "hookscope", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("hookscope ")


def test_a_tensor_of_the_wrong_shape_and_weights_that_do_not_fit(capsys, tmp_path: Path) -> None:
    """A 1-channel tensor into a 3-channel conv names the module; mismatched weights name the keys."""
    import torch

    torch.save(torch.randn(1, 1, 32, 32), tmp_path / "gray.pt")
    code, _, err = run(capsys, "report", "tests.models:LeNet", str(tmp_path / "gray.pt"), "--out", str(tmp_path / "r"))
    assert code == 1
    assert "the model's forward raised RuntimeError" in err
    assert "inside module 'conv1'" in err
    assert not (tmp_path / "r").exists()
    torch.save({"conv1.weight": torch.zeros(6, 3, 5, 5)}, tmp_path / "partial.pt")
    code, _, err = run(capsys, "list", "tests.models:LeNet", "--weights", str(tmp_path / "partial.pt"))
    assert code == 1
    assert "do not match LeNet: 9 missing (conv1.bias, conv2.bias, conv2.weight, fc1.bias and 5 more)" in err
