"""One ``progress=`` (``hookscope.progress``): None/False quiet, True lines on stderr, a stream gets the lines,
a callable gets ``(stage, done, total)``, in every function that takes it."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.errors import OptionError
from hookscope.progress import callback, quiet


def conv_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 5, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(5, 3)
    ).eval()  # fmt: skip


X = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
BATCHES = [X[:1], X[1:], X]


def run_cam(progress: Any, _: Path) -> None:  # 5 channels, 2 copies at a time: 3 passes per image
    hookscope.cam(conv_net(), X, "scorecam", 1, select="1", batch_size=2, progress=progress)


def run_attribute(progress: Any, _: Path) -> None:  # 10 steps x 2 images, 5 rows at a time: 4 passes
    hookscope.attribute(conv_net(), X, "integrated_gradients", 1, steps=10, batch_size=5, progress=progress)


def run_report(progress: Any, _: Path) -> None:
    hookscope.build_report(conv_net(), X, grads=True, progress=progress)


def run_extract(progress: Any, tmp_path: Path) -> None:
    hookscope.extract(conv_net(), BATCHES, out=tmp_path / "store", select="1", progress=progress, force=True)


CASES: dict[str, tuple[Callable[[Any, Path], None], list[tuple[str, int, int]]]] = {
    "cam": (run_cam, [("scorecam", done, 6) for done in range(7)]),
    "attribute": (run_attribute, [("integrated_gradients", done, 4) for done in range(5)]),
    "extract": (run_extract, [("extract", done, 3) for done in range(4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_callable_hears_every_step_of_each_stage(name: str, tmp_path: Path) -> None:
    run, expected = CASES[name]
    told: list[tuple[str, int, int]] = []
    run(lambda *step: told.append(step), tmp_path)
    assert told == expected


def test_build_report_tells_each_stage_from_its_start() -> None:
    told: list[tuple[str, int, int]] = []
    run_report(lambda *step: told.append(step), Path())
    stages = [stage for stage, done, _ in told if done == 0]
    assert stages == ["forward", "layers", "cam", "flow"]
    layers = len(hookscope.select_modules(conv_net()))
    assert ("layers", layers, layers) in told and told[-1] == ("flow", 1, 1)


@pytest.mark.parametrize("name", ["cam", "attribute", "report"])
def test_a_stream_gets_a_line_per_stage_and_true_writes_them_to_stderr(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = {"cam": run_cam, "attribute": run_attribute, "report": run_report}[name]
    stream = io.StringIO()
    run(stream, tmp_path)
    lines = stream.getvalue().splitlines()
    expected = {
        "cam": ["hookscope: scorecam 6/6"],
        "attribute": ["hookscope: integrated_gradients 4/4"],
        "report": ["hookscope: forward 1/1", f"hookscope: layers {len(hookscope.select_modules(conv_net()))}/"
                   f"{len(hookscope.select_modules(conv_net()))}", "hookscope: cam 1/1", "hookscope: flow 1/1"],
    }[name]  # fmt: skip
    assert lines == expected
    assert capsys.readouterr().err == ""  # a stream: nothing on stderr
    run(True, tmp_path)
    assert capsys.readouterr().err.splitlines() == expected
    for off in (False, None):
        run(off, tmp_path)
        assert capsys.readouterr() == ("", "")


def test_extract_writes_its_line_to_a_stream_and_stays_quiet_when_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = io.StringIO()
    run_extract(stream, tmp_path)
    assert "extract: " in stream.getvalue() and "3/3 batches" in stream.getvalue()
    for off in (False, None, True):  # True: a redrawn line on a terminal only (stderr is not one here)
        run_extract(off, tmp_path)
        assert capsys.readouterr() == ("", "")


def test_callback_turns_each_form_into_a_callable(capsys: pytest.CaptureFixture[str]) -> None:
    assert callback(None) is quiet and callback(False) is quiet
    told: list[tuple[str, int, int]] = []
    mine = lambda *step: told.append(step)  # noqa: E731
    assert callback(mine) is mine
    stream = io.StringIO()
    for done in range(3):
        callback(stream)("stage", done, 2)
    assert stream.getvalue() == "hookscope: stage 2/2\n"  # one line, when the stage ends
    callback(True)("stage", 0, 0)  # an unknown total: no line
    assert capsys.readouterr().err == ""
    with pytest.raises(OptionError, match=r"progress must be True, False, None, a stream or a callable.*got 3"):
        callback(3)  # type: ignore[arg-type]
