"""The command line as a new user meets it: outputs that cannot be written are refused before any
work with the right reason, warnings print on one line in the flags' words, and several calls are
counted in words."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from hookscope.cli import main, one_line
from hookscope.cli.outputs import cli_flags
from hookscope.errors import CaptureWarning
from hookscope.explain.layers import ordinal

TWO_OUTPUTS = """
import torch
from torch import nn

class Two(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.box = nn.Linear(4, 2)
        self.classes = nn.Linear(4, 3)

    def forward(self, x):
        h = self.conv(x).mean(dim=(2, 3))
        return {"box": self.box(h), "logits": self.classes(h)}

def two():
    return Two().eval()
"""


@pytest.mark.parametrize("command", ["cam", "report", "capture"])
def test_an_output_under_a_file_is_refused_before_the_model_is_loaded(command: str, tmp_path: Path, capsys) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    out = a_file / ("cam.png" if command == "cam" else "out")
    # the model spec names no file: were it loaded first, the error would be about the model
    code = main([command, str(tmp_path / "missing.py:net"), "random:1x3x8x8", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert f"cannot write {out}: {a_file} is a file, not a folder; pick another --out" in err


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("command", ["cam", "report", "capture"])
def test_an_output_in_proc_is_refused_with_the_reason(command: str, tmp_path: Path, capsys) -> None:
    out = "/proc/hookscope-out/cam.png" if command == "cam" else "/proc/hookscope-out"
    code = main([command, str(tmp_path / "missing.py:net"), "random:1x3x8x8", "--out", out])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert f"cannot write {out}: /proc takes no new files (a virtual or read-only filesystem" in err
    assert "missing.py" not in err  # found before the model


@pytest.mark.parametrize(
    ("api", "cli"),
    [
        (
            """pass output="out['logits']" (or another key) to choose""",
            "pass --output logits (or another key) to choose",
        ),
        ("pass output='out[1]' to choose", "pass --output 1 to choose"),
        ("pass output='out.hidden' to choose", "pass --output hidden to choose"),
        ("no tensor at output='boxes'", "no tensor at --output boxes"),
        ("rerun with resume=True, or --force (force=True)", "rerun with --resume, or --force"),
        ("grads=True differentiates", "--grads differentiates"),
        ("its output_attentions=True path", "its output_attentions=True path"),  # another keyword: left alone
    ],
)
def test_api_keywords_are_spelled_as_flags(api: str, cli: str) -> None:
    assert cli_flags(api) == cli


def test_a_warning_is_one_line_without_the_source() -> None:
    line = one_line(CaptureWarning("first\n  second"), CaptureWarning, "/lib/hookscope/x.py", 12, "warnings.warn(x)")
    assert line == "hookscope: warning: first second\n"
    assert one_line("slow", UserWarning, "x.py", 1) == "hookscope: warning: UserWarning: slow\n"


def test_the_command_line_prints_a_warning_in_the_flags_words(tmp_path: Path) -> None:
    models = tmp_path / "heads.py"
    models.write_text(TWO_OUTPUTS)
    done = subprocess.run(
        [sys.executable, "-m", "hookscope", "cam", f"{models}:two", "random:1x3x8x8", "--out", str(tmp_path / "c.png")],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warned == [
        "hookscope: warning: the model's output (dict) holds 2 tensors; using the first, out['box'] "
        "(others: out['logits']); pass --output logits (or another key) to choose"
    ]


def test_warnings_still_reach_python_filters(tmp_path: Path) -> None:
    """The CLI's formatting changes how a warning is printed, not whether it is raised or recorded."""
    models = tmp_path / "heads.py"
    models.write_text(TWO_OUTPUTS)
    before = warnings.formatwarning  # the standard library's, or one a framework imported earlier installed
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["cam", f"{models}:two", "random:1x3x8x8", "--out", str(tmp_path / "c.png")]) == 0
    assert [str(w.message).endswith("pass --output logits (or another key) to choose") for w in seen] == [True]
    assert warnings.formatwarning is before  # restored


@pytest.mark.parametrize(("n", "word"), [(1, "first"), (2, "second"), (10, "tenth"), (11, "11th"), (22, "22nd")])
def test_calls_are_counted_in_words(n: int, word: str) -> None:
    assert ordinal(n) == word


def test_cam_on_torchvision_says_the_weights_are_random(tmp_path: Path, capsys) -> None:
    code = main(["cam", "torchvision:resnet18", "random:1x3x32x32", "--out", str(tmp_path / "c.png")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "hookscope: note: random init: torchvision:resnet18 was built without weights; pass --weights FILE" in err


def test_a_panel_is_captioned_with_class_method_and_layer(tmp_path: Path, capsys) -> None:
    from PIL import Image

    import hookscope
    from hookscope.cli.inputs import load_input
    from hookscope.cli.models import load_model

    models = tmp_path / "heads.py"
    models.write_text(TWO_OUTPUTS)
    out = tmp_path / "panel.png"
    argv = ["cam", f"{models}:two", "random:1x3x8x8", "--output", "logits", "--panel", "--out", str(out)]
    assert main([*argv, "--method", "layercam"]) == 0, capsys.readouterr().err
    # oracle: the top-1 by hand, the layer named by hand, and the API's panel with those captions
    loaded = load_model(f"{models}:two")
    x = load_input(["random:1x3x8x8"], loaded.preprocess).x
    with torch.no_grad():
        top1 = int(loaded.model(x)["logits"][0].argmax())
    heat = hookscope.cam(loaded.model, x, "layercam", select="conv", output="logits")[0]
    expected = hookscope.panel(loaded.preprocess.show(x[0]), heat, labels=(f"class {top1}", "layercam", "at conv"))
    with Image.open(out) as drawn:
        assert drawn.size == expected.size and drawn.tobytes() == expected.tobytes()


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_answer_without_torch(flag: str) -> None:
    """``hookscope --help`` and ``--version`` import no torch: they answer at once, as argparse wrote them."""
    code = (
        "import sys\nfrom hookscope.cli import main\ntry:\n    main([sys.argv[1]])\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, 'hookscope.core.capture' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code, flag], capture_output=True, text=True, timeout=120, check=True)
    assert done.stderr.splitlines()[-1] == "False False"
    assert ("list every module" in done.stdout) if flag == "--help" else done.stdout.startswith("hookscope 0.")


def test_a_command_s_help_still_names_its_choices(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "MODEL efficientnet-lite0, mobilenet-v2" in out and "--cam METHOD [METHOD ...] CAM methods" in out


def test_report_says_which_output_and_class_it_explains_in_flags(tmp_path: Path, capsys) -> None:
    models = tmp_path / "heads.py"
    models.write_text(TWO_OUTPUTS)
    assert main(["report", f"{models}:two", "random:1x3x8x8", "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("hookscope: note:")]
    assert notes == [
        "hookscope: note: the model's output (dict) holds 2 tensors; using the first, out['box'] "
        "(others: out['logits']); pass --output logits (or another key) to choose",
        "hookscope: note: CAMs explain each image's top-1 class; pass --target N to choose",
    ]
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "pass --output logits (or another key) to choose" in page and "output=&#34;" not in page
    assert main(["report", f"{models}:two", "random:1x3x8x8", "--output", "logits", "--target", "1",
                 "--out", str(tmp_path / "r2")]) == 0  # fmt: skip
    assert "hookscope: note:" not in capsys.readouterr().err


def test_torchvision_init_weights_advice_is_phrased_for_the_command_line() -> None:
    """torchvision's "please set init_weights=True" names a keyword no flag reaches: the note says it in words."""
    from hookscope.cli.models import load_model

    loaded = load_model("torchvision:googlenet")  # its FutureWarning would fail here (warnings are errors)
    assert loaded.notes == (
        "random init: torchvision:googlenet was built without weights (torchvision's default init, which a later "
        "torchvision changes); pass --weights FILE to load a state dict",
    )
