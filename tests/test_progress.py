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


def run_patch_sweep(progress: Any, _: Path) -> None:  # 2 sites, one patched run a pass: 2 passes
    hookscope.patch_sweep(conv_net(), X, X.flip(-1), target=1, select=["0", "4"], batch_size=1, progress=progress)


def run_token_attribution(progress: Any, _: Path) -> None:  # 3 steps, the whole batch each: 3 passes
    torch.manual_seed(0)
    embed = nn.Embedding(10, 3)
    model = nn.Sequential(embed, nn.Flatten(), nn.Linear(12, 2))
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    hookscope.token_attribution(model, ids, 1, steps=3, baseline="zeros", embeddings=embed, progress=progress)


def run_probe(progress: Any, _: Path) -> None:  # two sites: one fit each
    x = torch.rand(16, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    net = conv_net()
    with hookscope.capture(net, ["3", "4"]) as cap:
        net(x)
    hookscope.probe(cap, torch.arange(16) % 2, progress=progress)


def run_export(progress: Any, tmp_path: Path) -> None:  # three batches in the store: three rows written
    pytest.importorskip("datasets")
    torch.manual_seed(0)
    tokens = [torch.rand(2, 3, 4) for _ in range(3)]  # (batch, context, d_in): what SAE Lens reads
    hookscope.extract(nn.Sequential(nn.Linear(4, 6)), tokens, out=tmp_path / "store", progress=False, force=True)
    hookscope.export(tmp_path / "store", tmp_path / "hf", format="datasets", force=True, progress=progress)


def run_steer_sweep(progress: Any, _: Path) -> None:  # 3 scales: a step each
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10)).eval()
    hookscope.steer_sweep(model, torch.tensor([[1, 2], [3, 4]]), torch.ones(4), select="0",
                          target=lambda out: out[:, -1, 0], scales=(-1.0, 0.0, 1.0), progress=progress)  # fmt: skip


CASES: dict[str, tuple[Callable[[Any, Path], None], list[tuple[str, int, int]]]] = {
    "cam": (run_cam, [("scorecam", done, 6) for done in range(7)]),
    "attribute": (run_attribute, [("integrated_gradients", done, 4) for done in range(5)]),
    "extract": (run_extract, [("extract", done, 3) for done in range(4)]),
    "patch_sweep": (run_patch_sweep, [("patch_sweep", done, 2) for done in range(3)]),
    "token_attribution": (run_token_attribution, [("integrated_gradients", done, 3) for done in range(4)]),
    "probe": (run_probe, [("probe", done, 2) for done in range(3)]),
    "export": (run_export, [("export", done, 3) for done in range(4)]),
    "steer_sweep": (run_steer_sweep, [("steer_sweep", done, 3) for done in range(4)]),
}
LAST = {  # the one line of each (one stage) on a stream, as on stderr with True
    "patch_sweep": "hookscope: patch_sweep 2/2",
    "token_attribution": "hookscope: integrated_gradients 3/3",
    "probe": "hookscope: probe 2/2",
    "export": "hookscope: export 3/3",
    "steer_sweep": "hookscope: steer_sweep 3/3",
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


@pytest.mark.parametrize("name", sorted(LAST))
def test_the_long_functions_render_the_same_lines(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = CASES[name][0]
    stream = io.StringIO()
    run(stream, tmp_path)
    assert stream.getvalue().splitlines() == [LAST[name]]
    run(True, tmp_path)
    assert capsys.readouterr().err.splitlines() == [LAST[name]]
    run(None, tmp_path)
    assert capsys.readouterr() == ("", "")


def test_extract_renders_the_same_line_with_its_throughput(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One rendering (hookscope.progress.Lines): extract's line is the others' with rows/s added, on a
    stream and on stderr alike, terminal or not; nothing redrawn with \\r."""
    stream = io.StringIO()
    run_extract(stream, tmp_path)
    (line,) = stream.getvalue().splitlines()
    assert line.startswith("hookscope: extract 3/3, ") and " rows/s, " in line and " written (" in line
    run_extract(True, tmp_path)
    err = capsys.readouterr().err
    assert err.startswith("hookscope: extract 3/3, ") and err.count("\n") == 1 and "\r" not in err
    for off in (False, None):
        run_extract(off, tmp_path)
        assert capsys.readouterr() == ("", "")


def test_a_long_stage_writes_a_line_every_so_often(monkeypatch: pytest.MonkeyPatch) -> None:
    from hookscope import progress

    stream = io.StringIO()
    lines = progress.Lines(stream, every=0.0)  # every step is due
    for done in range(4):
        lines("stage", done, 3)
    assert stream.getvalue().splitlines() == ["hookscope: stage 1/3", "hookscope: stage 2/3", "hookscope: stage 3/3"]
    quiet_stream = io.StringIO()
    slow = progress.Lines(quiet_stream)  # EVERY seconds: a short stage writes its last line only
    for done in range(4):
        slow("stage", done, 3)
    assert quiet_stream.getvalue() == "hookscope: stage 3/3\n"


def test_one_progress_type_one_renderer() -> None:
    """Two classes were called Lines (a redrawn line's stream in the CLI, the stage lines): one is left."""
    import hookscope.cli.meter as meter

    assert not hasattr(meter, "Lines") and not hasattr(meter, "extract_progress")
    assert isinstance(meter.Stages().plain, hookscope.progress.Lines)


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
