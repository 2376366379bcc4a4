"""The one output gate, ``new_output``: force replaces only what hookscope wrote, never the user's work."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hookscope._version import __version__
from hookscope.base.files import MARKER, mark, new_output, ours
from hookscope.errors import OptionError, OutputExistsError


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes: what a refusal must leave as it was."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def project(tmp_path: Path) -> Path:
    """A user's project folder: code, a picture and data, none of it hookscope's."""
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "train.py").write_text("print('train')\n")
    (folder / "cat.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (folder / "data" / "labels.csv").write_text("a,b\n")
    (folder / "notes.md").write_text("notes\n")
    return folder


def test_a_new_path_and_an_empty_folder_need_no_force(tmp_path: Path) -> None:
    assert new_output(tmp_path / "new", force=False, kind="store") == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    assert new_output(tmp_path / "empty", force=False, kind="report") == tmp_path / "empty"
    assert new_output(os.path.relpath(tmp_path / "new"), force=False, kind="store").is_absolute()


def test_a_folder_of_the_user_s_files_is_refused_with_force_naming_them(tmp_path: Path) -> None:
    folder = project(tmp_path)
    before = snapshot(folder)
    for force in (False, True):
        with pytest.raises(OutputExistsError) as info:
            new_output(folder, force=force, kind="report")
        message = str(info.value)
        assert message == (
            f"{folder} already exists and holds 4 files hookscope did not write (cat.png, data/, notes.md and 1 "
            "more); hookscope replaces only its own outputs: pick a new folder, or move those out"
        )
        assert "force" not in message  # force would not be allowed, so it is not offered
    assert snapshot(folder) == before


@pytest.mark.parametrize("kind", ["report", "export", "store"])
def test_a_marked_folder_is_replaced_only_with_force(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "index.html").write_text("<p>page</p>")
    (out / "parts").mkdir()
    mark(out, kind)
    assert json.loads((out / MARKER).read_text()) == {"kind": kind, "hookscope": __version__,
                                                       "files": ["index.html", "parts"]}  # fmt: skip
    assert ours(out) == (kind, [])
    with pytest.raises(OutputExistsError, match=rf"already exists; pass force=True to replace it \(the hookscope "
                                                rf"{kind} there\), or pick another path$"):  # fmt: skip
        new_output(out, force=False, kind="report")
    assert new_output(out, force=True, kind="report") == out
    (out / "mine.txt").write_text("mine")  # a file the user put into it afterwards: not hookscope's
    with pytest.raises(OutputExistsError, match=r"holds 1 file hookscope did not write \(mine\.txt\)"):
        new_output(out, force=True, kind="report")


def test_a_store_and_an_unmarked_page_are_recognised(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "shards").mkdir(parents=True)
    (store / "manifest.json").write_text('{\n "format": "hookscope.store",\n "version": 2\n}\n')
    assert ours(store) == ("store", [])
    with pytest.raises(OutputExistsError, match=r"pass resume=True to continue it or force=True to replace it"):
        new_output(store, force=False, kind="store", resumable=True)
    assert new_output(store, force=True, kind="store") == store
    page = tmp_path / "page"
    page.mkdir()
    (page / "index.html").write_text('<html><head><meta name="generator" content="hookscope 0.9">')
    assert ours(page) == ("report", [])  # a report written before the marker
    (page / "index.html").write_text("<html><head><title>my own page</title>")
    assert ours(page) == ("", ["index.html"])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text('{"format": "someone.else"}')
    assert ours(tmp_path / "other") == ("", ["manifest.json"])


def test_it_never_replaces_the_current_folder_its_parents_home_or_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "home" / "me" / "work"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home" / "me"))
    refused = {
        ".": "the current folder",
        "..": "the home folder",
        str(tmp_path / "home"): "a parent of the current folder",
        "/": "the filesystem root",
    }
    for out, why in refused.items():
        for force in (False, True):
            with pytest.raises(OutputExistsError, match=rf"is {why}, which hookscope never replaces; name a new "
                                                        "store path instead$"):  # fmt: skip
                new_output(out, force=force, kind="store")
    assert list(work.iterdir()) == []  # even an empty current folder: a staged rename would move it away


def test_it_never_replaces_an_input_or_the_folder_holding_one(tmp_path: Path) -> None:
    folder = project(tmp_path)
    picture = folder / "cat.png"
    with pytest.raises(OutputExistsError, match=rf"{folder} is the folder holding the input {picture}, which"):
        new_output(folder, force=True, kind="report", inputs=["resnet18", str(picture)])
    with pytest.raises(OutputExistsError, match=r"cat\.png is the input \S*cat\.png, which hookscope never replaces"):
        new_output(picture, force=True, kind="picture", inputs=[os.path.relpath(picture)], file=True)
    with pytest.raises(OutputExistsError, match=r"is the folder holding the input .*train\.py:Net"):
        new_output(folder, force=True, kind="store", inputs=[f"{folder / 'train.py'}:Net"])
    empty = tmp_path / "images"
    empty.mkdir()
    (empty / "a.png").write_bytes(b"png")
    with pytest.raises(OutputExistsError, match=r"is the input"):
        new_output(empty, force=True, kind="store", inputs=[str(empty)])
    assert new_output(folder / "report", force=False, kind="report", inputs=[str(picture)]) == folder / "report"


def test_a_single_file_output_is_replaced_with_force_and_never_a_folder(tmp_path: Path) -> None:
    out = tmp_path / "cam.png"
    out.write_bytes(b"old")
    with pytest.raises(OutputExistsError, match=r"cam\.png already exists; pass force=True to replace it, or pick"):
        new_output(out, force=False, kind="picture", file=True)
    assert new_output(out, force=True, kind="picture", file=True) == out
    with pytest.raises(OptionError, match=r"is a folder, not a file; pick a file name for the picture"):
        new_output(tmp_path, force=True, kind="picture", file=True)
    with pytest.raises(OptionError, match=r"cam\.png is a file, not a folder; pick another folder for the store"):
        new_output(out, force=True, kind="store")
    assert out.read_bytes() == b"old"
