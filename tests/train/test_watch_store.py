"""A watch store read back by hookscope.load and `hookscope info`, and TensorBoard's event files by EventAccumulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope.cli import main


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Path]:
    """A small MLP trained 9 steps inside watch(every=2), with a dead layer, to a store and TensorBoard."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("watch")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    with torch.no_grad():
        model[0].bias[:12] = -50.0
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with hookscope.watch(model, opt, every=2, out=root / "run.hookscope", sinks=[f"tensorboard:{root / 'tb'}"]) as w:
        for _ in range(9):
            loss = F.cross_entropy(model(torch.randn(16, 8)), torch.randint(0, 3, (16,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.set_num_threads(threads)
    return w, root / "run.hookscope", root / "tb"


def test_the_store_reads_back_what_watch_saw(watched: tuple[Any, Path, Path]) -> None:
    w, store, _ = watched
    run = hookscope.load(store)
    assert run.complete and list(run.histories()) == ["0", "1", "2"]
    for name in ("0", "1", "2"):
        torch.testing.assert_close(run.history(name).rows, w.history(name).rows, rtol=0, atol=0, equal_nan=True)
    assert run.history("0").steps == [0, 2, 4, 6, 8]
    assert run.alerts == w.alerts and [a.kind for a in run.alerts] == ["dead"]
    assert run.config["steps"] == 9 and run.config["ended"] == "normally"
    with pytest.raises(hookscope.NotCapturedError, match=r"'3' has no history .* watched 3 modules"):
        run.history("3")


def test_hookscope_info_describes_a_watch_store(watched: tuple[Any, Path, Path], capsys: Any) -> None:
    _, store, _ = watched
    assert main(["info", str(store)]) == 0
    out = capsys.readouterr().out
    assert "hookscope watch store" in out and "watch every 2 steps: 9 steps, 5 logged (steps 0..8)" in out
    assert "alerts    1" in out and "dead at '1'" in out
    assert [line.split()[0] for line in out.splitlines()[-3:]] == ["0", "1", "2"]


def test_tensorboard_holds_scalars_and_histograms(watched: tuple[Any, Path, Path]) -> None:
    w, _, logdir = watched
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    events = accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0})
    events.Reload()
    scalars = events.Scalars("2/grad_norm")
    assert [e.step for e in scalars] == [0, 2, 4, 6, 8]
    assert [e.value for e in scalars] == pytest.approx(w.history("2")["grad_norm"], rel=1e-6)
    assert [e.value for e in events.Scalars("1/dead")] == pytest.approx(w.history("1")["dead"])
    tags = set(events.Tags()["histograms"])
    assert {"0/output", "0/grad_output", "0/grad/weight", "0/weight/weight", "1/output"} <= tags
    assert events.Histograms("0/weight/weight")[0].histogram_value.num == 16 * 8


def test_force_never_replaces_the_user_s_files(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.py").write_text("mine")
    with pytest.raises(hookscope.OutputExistsError, match=r"hookscope did not write \(train\.py\)"):
        hookscope.watch(model, out=tmp_path / "run", force=True).__enter__()
    (tmp_path / "log.txt").write_text("mine")  # a file where the store goes: once deleted under force
    with pytest.raises(hookscope.OptionError, match=r"log\.txt is a file, not a folder; pick another folder"):
        hookscope.watch(model, out=tmp_path / "log.txt", force=True).__enter__()
    assert (tmp_path / "run" / "train.py").read_text() == "mine" and (tmp_path / "log.txt").read_text() == "mine"
    assert hookscope.find_hooks(model) == []


def test_an_existing_store_is_refused_unless_force(watched: tuple[Any, Path, Path]) -> None:
    _, store, _ = watched
    model = nn.Linear(2, 2)
    with pytest.raises(hookscope.OutputExistsError, match="already exists; pass force=True"):
        hookscope.watch(model, out=store).__enter__()
    assert hookscope.find_hooks(model) == []
