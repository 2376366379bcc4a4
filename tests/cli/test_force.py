"""``--force`` replaces only what hookscope wrote (issue 40): a project folder, the current folder and an
input's folder are refused before any work, with or without it, and every file is left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from hookscope.cli import demo, loading, main

TINY = "random:1x1x32x32"  # lenet's input


def _no_work(*args: object, **kwargs: object) -> None:
    raise AssertionError("the command did work before checking its output")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's folder: a training script, a picture (lenet's size), data."""
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "train.py").write_text("print('training')\n")
    Image.new("L", (32, 32), 128).save(folder / "cat.png")
    (folder / "data" / "labels.csv").write_text("0,1\n")
    return folder


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("hookscope: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "lenet", TINY],
        ["capture", "lenet", TINY],
        ["extract", "lenet", TINY],
        ["demo", "--model", "lenet"],
    ],
    ids=["report", "capture", "extract", "demo"],
)
def test_force_refuses_a_folder_of_the_user_s_files(
    capsys, project: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setattr(loading, "load_model", _no_work)
    monkeypatch.setattr(demo, "DEMO_MODELS", {"lenet": _no_work})
    before = snapshot(project)
    shown = error_of(capsys, *argv, "--out", str(project), "--force")
    assert f"{project} already exists and holds 3 files hookscope did not write (cat.png, data/, train.py)" in shown
    assert "--force" not in shown and "force=True" not in shown
    assert snapshot(project) == before


def test_out_dot_is_refused_even_with_force(capsys, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading, "load_model", _no_work)
    monkeypatch.chdir(project)
    before = snapshot(project)
    for argv in (["capture", "lenet", TINY], ["report", "lenet", TINY], ["extract", "lenet", TINY]):
        shown = error_of(capsys, *argv, "--out", ".", "--force")
        assert shown.endswith(f"{project} is the current folder, which hookscope never replaces; name a new "
                              f"{'report' if argv[0] == 'report' else 'store'} path instead")  # fmt: skip
    shown = error_of(capsys, "report", "lenet", TINY, "--out", "..", "--force")
    assert "is a parent of the current folder, which hookscope never replaces" in shown
    assert snapshot(project) == before


def test_the_folder_holding_an_input_is_refused(capsys, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading, "load_model", _no_work)
    picture = project / "cat.png"
    (project / "train.py").unlink()  # even were the rest hookscope's: the input is in it
    (project / "data" / "labels.csv").unlink()
    (project / "data").rmdir()
    before = snapshot(project)
    shown = error_of(capsys, "report", "lenet", str(picture), "--out", str(project), "--force")
    assert f"{project} is the folder holding the input {picture}, which hookscope never replaces" in shown
    shown = error_of(capsys, "cam", "lenet", str(picture), "--out", str(picture), "--force")
    assert f"{picture} is the input {picture}, which hookscope never replaces" in shown
    shown = error_of(capsys, "extract", "lenet", str(project), "--out", str(project), "--force")
    assert f"{project} is the input {project}, which hookscope never replaces" in shown
    assert snapshot(project) == before


def test_force_replaces_what_hookscope_wrote(capsys, tmp_path: Path) -> None:
    report, store = tmp_path / "report", tmp_path / "store"
    assert main(["report", "lenet", TINY, "--out", str(report)]) == 0
    assert main(["capture", "lenet", TINY, "--out", str(store)]) == 0
    capsys.readouterr()
    assert "pass --force to replace it (the hookscope report there)" in error_of(
        capsys, "report", "lenet", TINY, "--out", str(report)
    )
    assert "pass --force to replace it (the hookscope store there)" in error_of(
        capsys, "report", "lenet", TINY, "--out", str(store)
    )
    (report / "index.html").write_text("stale")
    assert main(["report", "lenet", TINY, "--out", str(report), "--force"]) == 0
    assert "lenet" in (report / "index.html").read_text(encoding="utf-8")
    assert main(["capture", "lenet", TINY, "--out", str(store), "--force"]) == 0
    assert main(["extract", "lenet", TINY, "--out", str(store), "--force"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report", "store"]
