"""The command line as a new user meets it (issue 16): no traceback, no wrong hint, no work lost.

Each test runs ``hookscope.cli.main([...])`` end to end and checks the exit status, the lines on
stderr and the files left behind.
"""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

import pytest
import torch
from PIL import Image

from hookscope import progress as lines_module
from hookscope.base.files import mark, write_atomically
from hookscope.cli import commands, demo, loading, main
from hookscope.errors import StoreError
from hookscope.store import shard_writer
from hookscope.zoo import lenet

TINY = "random:1x1x32x32"  # lenet's input


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    """The single ``hookscope: error:`` line on stderr (log lines of the run may precede it)."""
    errors = [line for line in err.splitlines() if line.startswith("hookscope: error: ")]
    assert len(errors) == 1, err
    assert "Traceback" not in err
    return errors[0]


def write(path: Path, source: str) -> Path:
    path.write_text(source)
    return path


# -- 1. list: modules that never ran ------------------------------------------------------------
def test_list_says_which_modules_never_ran(capsys, tmp_path: Path) -> None:
    """nn.MultiheadAttention reads out_proj's weights without calling it (as in torchvision's ViT),
    and a spare layer is never called: both are listed as not run, containers as containers."""
    source = write(tmp_path / "attn.py", (
        "import torch\n\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)\n"
        "        self.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)])\n"
        "        self.spare = torch.nn.Linear(8, 8)\n"
        "        self.act = torch.nn.ReLU()\n\n"
        "    def forward(self, x):\n"
        "        x = self.attn(x, x, x)[0]\n"
        "        for block in self.blocks:\n"
        "            x = self.act(block(x))\n"
        "        return x\n\n"
        "def build():\n"
        "    return Net()\n"
    ))  # fmt: skip
    code, out, err = run(capsys, "list", f"{source}:build", "--input", "random:2x5x8")
    assert code == 0
    rows = {line.split()[0]: " ".join(line.split()[2:]) for line in out.splitlines()[1:]}
    assert rows["attn.out_proj"].endswith("(did not run)")
    assert rows["spare"].endswith("(did not run)")
    assert rows["blocks"].endswith("(container)")
    assert rows["blocks.0"].endswith("(2, 5, 8)")
    assert rows["act"].endswith("(2, 5, 8) (2 calls)")
    assert err.startswith("hookscope: 2 of the modules did not run on this input (first: 'attn.out_proj')")
    assert "Traceback" not in err


# -- 2. a model file that raises, does not parse or does not import --------------------------------
@pytest.mark.parametrize(
    ("source", "message", "line"),
    [
        (
            "import torch\n\ndef build():\n    raise RuntimeError('no such layer')\n",
            "building the model '{spec}' raised RuntimeError: no such layer",
            4,
        ),
        (
            "import torch\ndef build(:\n    pass\n",
            "importing model file '{file}' raised SyntaxError: invalid syntax",
            2,
        ),
        (
            "import torch\nimport not_a_module_xyz\n\ndef build():\n    pass\n",
            "importing model file '{file}' raised ModuleNotFoundError: No module named 'not_a_module_xyz'",
            2,
        ),
        (
            "import torch\nx = torch.zeros(2, 3) @ torch.zeros(2, 3)\n\ndef build():\n    pass\n",
            "importing model file '{file}' raised RuntimeError: mat1 and mat2 shapes cannot be multiplied",
            2,
        ),
    ],
    ids=["raises", "syntax", "import", "raises-in-torch"],
)
def test_a_broken_model_file_is_one_line_naming_file_and_line(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, message: str, line: int
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "mine.py", source)
    code, _, err = run(capsys, "list", "mine.py:build")
    assert code == 1
    shown = one_error_line(err)
    assert message.format(spec="mine.py:build", file="mine.py") in shown
    assert f"(mine.py, line {line}); rerun with --debug for the traceback" in shown
    code, _, err = run(capsys, "list", "mine.py:build", "--debug")
    assert code == 1 and "Traceback (most recent call last)" in err


def test_a_module_that_raises_on_import_names_its_file(capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "raising_pkg_hs.py", "import torch\n\nVALUE = 1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "list", "raising_pkg_hs:build")
    assert code == 1
    shown = one_error_line(err)
    assert "importing module 'raising_pkg_hs' raised ZeroDivisionError: division by zero" in shown
    assert "(raising_pkg_hs.py, line 3)" in shown
    code, _, err = run(capsys, "list", "no_such_pkg_hs.sub:build")
    assert one_error_line(err).endswith("cannot import module 'no_such_pkg_hs.sub': No module named 'no_such_pkg_hs'")


# -- 3. a tensor file that is empty, cut short or not a tensor file --------------------------------
def _damaged_files(tmp_path: Path) -> dict[str, Path]:
    torch.save(torch.randn(1, 1, 32, 32), tmp_path / "whole.pt")
    whole = (tmp_path / "whole.pt").read_bytes()
    (tmp_path / "zero.pt").write_bytes(b"")
    (tmp_path / "cut.pt").write_bytes(whole[: len(whole) // 2])
    Image.new("RGB", (8, 8)).save(tmp_path / "photo.jpg")
    (tmp_path / "photo.pt").write_bytes((tmp_path / "photo.jpg").read_bytes())
    torch.save({"x": torch.zeros(1), "args": argparse.Namespace(lr=0.1)}, tmp_path / "objects.pt")
    return {p.stem: p for p in tmp_path.iterdir()}


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("zero", "it is an empty file (0 bytes)"),
        ("cut", "it is a truncated zip archive (its end is missing"),
        ("photo", "it is a JPEG image, not a tensor file"),
        ("objects", "it holds pickled objects (argparse.Namespace), not tensors only"),
    ],
)
def test_a_bad_tensor_file_says_what_is_wrong(capsys, tmp_path: Path, name: str, reason: str) -> None:
    path = _damaged_files(tmp_path)[name]
    code, _, err = run(capsys, "list", "lenet", "--input", str(path))
    assert code == 1
    assert f"cannot read tensor file {str(path)!r}: {reason}" in one_error_line(err)


# -- 4. weights that are not a checkpoint are never answered with --trust-weights -------------------
@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("photo.jpg", "it is a JPEG image, not a checkpoint"),
        ("zero.pt", "it is an empty file (0 bytes)"),
        ("cut.pt", "it is a truncated zip archive"),
    ],
)
def test_weights_that_are_no_checkpoint_never_suggest_trust(capsys, tmp_path: Path, name: str, reason: str) -> None:
    _damaged_files(tmp_path)
    code, _, err = run(capsys, "list", "lenet", "--weights", str(tmp_path / name))
    shown = one_error_line(err)
    assert code == 1 and reason in shown
    assert "--trust-weights" not in shown and "pickled" not in shown


def test_a_checkpoint_of_objects_suggests_trust_and_safetensors_load(capsys, tmp_path: Path) -> None:
    _damaged_files(tmp_path)
    code, _, err = run(capsys, "list", "lenet", "--weights", str(tmp_path / "objects.pt"))
    assert code == 1
    trust = "holds pickled objects; pass --trust-weights to unpickle it (this runs code the file names, such as "
    assert trust + "argparse.Namespace)" in one_error_line(err)
    save_file = pytest.importorskip("safetensors.torch").save_file
    save_file(lenet.lenet().state_dict(), str(tmp_path / "lenet.safetensors"))
    code, out, _ = run(capsys, "list", "lenet", "--weights", str(tmp_path / "lenet.safetensors"))
    assert code == 0 and "conv1" in out


# -- 5. an existing output is refused before any work, in the command line's words -----------------
def _no_work(*args: object, **kwargs: object) -> None:
    raise AssertionError("the command did work before checking its output")


@pytest.mark.parametrize(
    ("argv", "patched", "message"),
    [
        (["report", "lenet", TINY, "--out", "{dir}"], (loading, "load_model"), "pass --force to replace it"),
        (["report", "--from", "{store}", "--out", "{dir}"], (commands, "load"), "pass --force to replace it"),
        (["demo", "--model", "lenet", "--out", "{dir}"], (demo, "build_report"), "pass --force to replace it"),
        (["cam", "lenet", TINY, "--out", "{file}"], (loading, "load_model"), "pass --force to replace it"),
        (["capture", "lenet", TINY, "--out", "{store}"], (loading, "load_model"), "pass --force to replace it"),
        (
            ["extract", "lenet", TINY, "--out", "{store}"],
            (loading, "load_model"),
            "pass --resume to continue it or --force to replace it",
        ),
    ],
    ids=["report", "report-from", "demo", "cam", "capture", "extract"],
)
def test_an_existing_output_is_refused_before_any_work(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], patched: tuple[object, str], message: str
) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "index.html").write_text("old")
    mark(tmp_path / "dir", "report")  # hookscope's own: --force would replace it, so the message offers it
    (tmp_path / "file.png").write_bytes(b"old")
    assert main(["capture", "lenet", TINY, "--out", str(tmp_path / "store")]) == 0
    capsys.readouterr()
    monkeypatch.setattr(*patched, _no_work)
    names = {"{dir}": "dir", "{file}": "file.png", "{store}": "store"}
    code, _, err = run(capsys, *[str(tmp_path / names[a]) if a in names else a for a in argv])
    shown = one_error_line(err)
    assert code == 1 and message in shown
    assert "force=True" not in shown and "resume=True" not in shown
    assert (tmp_path / "dir" / "index.html").read_text() == "old" and (tmp_path / "file.png").read_bytes() == b"old"


def test_a_store_error_during_extract_names_the_flags(capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk in the middle of extract: the store's advice, "rerun with resume=True", as --resume."""

    def full(path: Path, *args: object) -> None:
        raise StoreError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr(shard_writer, "write_shard", full)
    code, _, err = run(capsys, "extract", "lenet", "random:8x1x32x32", "--batch-size", "4",
                       "--out", str(tmp_path / "acts"))  # fmt: skip
    shown = one_error_line(err)
    assert code == 1 and "No space left on device" in shown
    assert "rerun with --resume to continue" in shown and "resume=True" not in shown


# -- 6. the report says what the input was ------------------------------------------------------
def test_the_report_names_its_input(capsys, tmp_path: Path) -> None:
    torch.save(torch.randn(2, 1, 32, 32), tmp_path / "digits.pt")
    code, _, _ = run(capsys, "report", "lenet", str(tmp_path / "digits.pt"), "--out", str(tmp_path / "r"))
    page = (tmp_path / "r" / "index.html").read_text()
    assert code == 0 and "input: the tensor in" in page and "digits.pt" in page
    assert "random values" not in page
    code, _, _ = run(capsys, "report", "lenet", TINY, "--out", str(tmp_path / "r2"))
    assert code == 0 and f"input: random values ({TINY}" in (tmp_path / "r2" / "index.html").read_text()


# -- 14. files follow the umask ----------------------------------------------------------------
@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield 0o027
    os.umask(old)


def test_an_atomic_write_follows_the_umask_whatever_its_writer_made(tmp_path: Path, umask_027: int) -> None:
    def private(tmp: Path) -> None:  # as tempfile and safetensors do
        tmp.write_bytes(b"x")
        tmp.chmod(0o600)

    write_atomically(tmp_path / "out.bin", private)
    assert stat.S_IMODE((tmp_path / "out.bin").stat().st_mode) == 0o640


def test_cam_writes_its_picture_with_the_mode_of_the_umask(capsys, tmp_path: Path, umask_027: int) -> None:
    code, _, _ = run(capsys, "cam", "lenet", TINY, "--out", str(tmp_path / "cam.png"))
    assert code == 0 and stat.S_IMODE((tmp_path / "cam.png").stat().st_mode) == 0o640


# -- 15. progress, and Score-CAM's batch size -----------------------------------------------------
def test_extract_off_a_terminal_writes_progress_lines(capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines_module, "EVERY", 0.0)
    code, _, err = run(capsys, "extract", "lenet", "random:12x1x32x32", "--batch-size", "4", "--select", "conv1",
                       "--out", str(tmp_path / "acts"))  # fmt: skip
    lines = [line for line in err.splitlines() if line.startswith("hookscope: extract ")]
    assert code == 0 and len(lines) == 3 and "\r" not in err  # one line a batch, when each is due
    assert lines[-1].startswith("hookscope: extract 3/3, ") and "rows/s" in lines[-1]
    code, _, err = run(capsys, "report", "lenet", TINY, "--out", str(tmp_path / "r"))
    assert code == 0 and "hookscope: forward 1/1" in err.splitlines()


def test_cam_batch_size_reaches_score_cam(capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real = commands.cam

    def spy(*args: object, batch_size: int, **kwargs: object) -> torch.Tensor:
        seen.append(batch_size)
        return real(*args, batch_size=batch_size, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(commands, "cam", spy)
    argv = ["cam", "lenet", TINY, "--method", "scorecam", "--batch-size", "4", "--out", str(tmp_path / "s.png")]
    code, printed, _ = run(capsys, *argv)
    assert code == 0 and printed.strip() == str(tmp_path / "s.png") and seen == [4]
