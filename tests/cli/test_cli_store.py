"""The store commands: capture, extract, info and report --from, end to end against the Python API."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import skimage.data
import torch
from PIL import Image

import hookscope
from hookscope.cli import main
from hookscope.cli.inputs import load_input
from hookscope.explain.targets import scores
from hookscope.store.reader import load
from hookscope.zoo.lenet import lenet
from hookscope.zoo.preprocess import Preprocess


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_capture_saves_what_the_python_capture_holds(capsys, tmp_path: Path) -> None:
    out = tmp_path / "run.hookscope"
    argv = ["capture", "lenet", "random:2x1x32x32", "--select", "conv*", "--kinds", "output", "grad_output"]
    code, printed, _ = run(capsys, *argv, "--out", str(out))
    assert code == 0 and printed.strip() == str(out)
    model, x = lenet(), load_input(["random:2x1x32x32"]).x
    with hookscope.capture(model, "conv*", kinds=("output", "grad_output")) as cap:
        picked, _ = scores(model(x.clone().requires_grad_()), None)
        picked.sum().backward()
    stored = load(out)
    assert list(stored) == ["conv1", "conv2"] and stored.config["select"] == ["conv1", "conv2"]
    for site in stored:
        assert torch.equal(stored[site].output, cap[site].output)
        assert torch.equal(stored[site].grad_output, cap[site].grad_output)
    code, _, err = run(capsys, *argv, "--out", str(out))
    assert code == 1 and "already exists; pass --force to replace it" in err and "force=True" not in err


def test_extract_writes_every_batch_and_info_describes_it(capsys, tmp_path: Path) -> None:
    out = tmp_path / "acts.hookscope"
    code, printed, err = run(capsys, "extract", "lenet", "random:10x1x32x32", "--batch-size", "4",
                             "--select", "conv*", "fc3", "--kinds", "input", "output", "--out", str(out))  # fmt: skip
    assert code == 0 and printed.strip() == str(out)
    assert err.startswith("hookscope: extract 3/3, ") and err.count("\n") == 1  # off a terminal: one plain line
    model, x = lenet(), load_input(["random:10x1x32x32"]).x
    stored = load(out)
    assert stored.batches == [0, 1, 2] and stored.rows == 10
    for index, batch in enumerate(x.split(4)):
        with hookscope.capture(model, ["conv*", "fc3"], kinds=("input", "output")) as cap, torch.no_grad():
            model(batch)
        for site in ("conv1", "conv2", "fc3"):
            assert torch.equal(stored.batch(index)[site].output, cap[site].output)
    code, printed, _ = run(capsys, "info", str(out))
    assert code == 0
    assert "hookscope store (format 2), complete" in printed
    assert "model     LeNet (hookscope.zoo.lenet), 61,706 parameters, weights sha256" in printed
    assert f"hookscope {hookscope.__version__}, torch {torch.__version__}" in printed
    assert "run       extract: select ['conv*', 'fc3'], kinds input, output" in printed
    assert "batches   3 (10 rows)" in printed
    row = re.search(r"^conv2 +Conv2d +output +out +\(4, 16, 10, 10\) +float32 +3 +(\S+ \S+)$", printed, re.M)
    assert row is not None and row.group(1) == "64.0 kB"  # 10 rows of 16 x 10 x 10 float32


def test_extract_reductions_and_statistics(capsys, tmp_path: Path) -> None:
    reduced, stats = tmp_path / "reduced", tmp_path / "stats"
    code, _, _ = run(capsys, "extract", "lenet", "random:6x1x32x32", "--select", "conv1", "--reduce", "spatial_mean",
                     "--dtype", "bfloat16", "--out", str(reduced))  # fmt: skip
    assert code == 0
    model, x = lenet(), load_input(["random:6x1x32x32"]).x
    with torch.no_grad():
        expected = model.conv1(x).mean(dim=(2, 3)).to(torch.bfloat16)
    assert torch.equal(load(reduced)["conv1"].output, expected)
    assert load(reduced).config["reduce"] == "spatial_mean() -> cast(bfloat16)"
    code, _, _ = run(capsys, "extract", "lenet", "random:6x1x32x32", "--select", "conv1", "--stats-only",
                     "--per-channel", "--batch-size", "4", "--out", str(stats))  # fmt: skip
    assert code == 0
    with torch.no_grad():
        values = model.conv1(x).double()
    got = load(stats).stats("conv1")
    assert got.count == values.numel() and got.mean == pytest.approx(float(values.mean()), rel=1e-9)
    assert got.channels is not None and len(got.channels.n) == 6
    _, printed, _ = run(capsys, "info", str(stats))
    assert re.search(r"^conv1 +Conv2d +output +out +\(4, 6, 28, 28\) +float32 +2 +28,224 ", printed, re.M)
    code, _, err = run(
        capsys, "extract", "lenet", "random:6x1x32x32", "--reduce", "median", "--out", str(tmp_path / "x")
    )
    assert code == 1 and "unknown reduction 'median'" in err


def test_report_from_a_store_shows_its_layers_without_the_model(capsys, tmp_path: Path) -> None:
    run(capsys, "extract", "lenet", "random:6x1x32x32", "--select", "conv*", "--stats-only", "--out",
        str(tmp_path / "stats"))  # fmt: skip
    run(capsys, "capture", "lenet", "random:2x1x32x32", "--select", "conv*", "--kinds", "output", "grad_output",
        "--out", str(tmp_path / "grads"))  # fmt: skip
    for store, report in (("stats", "r1"), ("grads", "r2")):
        code, printed, _ = run(capsys, "report", "--from", str(tmp_path / store), "--out", str(tmp_path / report))
        assert code == 0 and printed.strip() == str(tmp_path / report / "index.html")
    stats_page = (tmp_path / "r1" / "index.html").read_text()
    got = load(tmp_path / "stats").stats("conv2")
    assert "conv1" in stats_page and "conv2" in stats_page and f"{got.mean:.4g}" in stats_page
    assert "statistics over the whole run" in stats_page and "data:image/png" not in stats_page  # no pictures
    grads_page = (tmp_path / "r2" / "index.html").read_text()
    assert 'id="flow-chart"' in grads_page and "numbers and pictures of batch 0" in grads_page
    with pytest.raises(SystemExit) as usage:
        main(["report", "lenet", "--from", str(tmp_path / "stats")])
    assert usage.value.code == 2
    with pytest.raises(SystemExit) as usage:
        main(["report", "lenet"])
    assert usage.value.code == 2 and "report needs MODEL and INPUT..., or --from STORE" in capsys.readouterr().err
    code, _, err = run(capsys, "report", "--from", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r3"))
    assert code == 1 and err.count("\n") == 1 and "does not exist" in err


def test_the_store_commands_have_help_with_an_example(capsys) -> None:
    for command in ("capture", "extract", "info"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "example:" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "torchrun --nproc-per-node 2 -m hookscope extract" in capsys.readouterr().out


def test_extract_reads_a_folder_of_images_one_at_a_time(capsys, tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    cat = Image.fromarray(skimage.data.chelsea())
    for i, size in enumerate([(120, 90), (64, 64), (90, 120)]):
        cat.resize(size).save(photos / f"{i}.png")
    code, _, _ = run(capsys, "extract", "lenet", str(photos), "--batch-size", "2", "--kinds", "input",
                     "--select", "conv1", "--out", str(tmp_path / "acts"))  # fmt: skip
    assert code == 0
    stored = load(tmp_path / "acts")
    assert stored.batches == [0, 1] and stored.rows == 3
    expected = load_input([str(photos)], lenet_preprocess()).x  # the whole folder at once, as `report` reads it
    assert torch.equal(torch.cat(stored["conv1"].values("input")), expected)


def lenet_preprocess() -> Preprocess:
    from hookscope.cli.models import load_model

    return load_model("lenet").preprocess
