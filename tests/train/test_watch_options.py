"""watch's vocabulary: sinks= is the one spelling of TensorBoard, flush_every has one default and one rule."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope.cli.parser import build_parser
from hookscope.store.format import FLUSH_EVERY


def _step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    loss = F.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 2, (8,)))
    opt.zero_grad()
    loss.backward()
    opt.step()


def _small() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_tensorboard_keyword_is_the_deprecated_spelling_of_the_tensorboard_sink(tmp_path: Path) -> None:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    model, opt = _small()
    use = r'watch\(tensorboard=DIR\) is deprecated .*; use watch\(sinks=\["tensorboard:DIR"\]\)'
    with pytest.warns(DeprecationWarning, match=use):
        w = hookscope.watch(model, opt, every=1, tensorboard=tmp_path / "tb")
    with w:
        for _ in range(3):
            _step(model, opt)
    events = accumulator.EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    events.Reload()  # it still works for one release: the same sink as sinks=["tensorboard:DIR"]
    assert [e.value for e in events.Scalars("0/grad_norm")] == pytest.approx(w.history("0")["grad_norm"], rel=1e-6)


def test_flush_every_has_one_default_everywhere() -> None:
    defaults = {
        "watch": inspect.signature(hookscope.watch).parameters["flush_every"].default,
        "extract": inspect.signature(hookscope.extract).parameters["flush_every"].default,
        "--flush-every": build_parser().parse_args(["extract", "lenet", "images/", "--out", "x"]).flush_every,
    }
    assert defaults == dict.fromkeys(defaults, FLUSH_EVERY) and FLUSH_EVERY == 5.0


def test_flush_every_is_checked_as_extract_checks_it(tmp_path: Path) -> None:
    model, opt = _small()
    for wrong in (0, -1.0, "5", True):
        with pytest.raises(hookscope.OptionError, match="flush_every must be a number of seconds above 0, or None"):
            hookscope.watch(model, opt, out=tmp_path / "run.hookscope", flush_every=wrong)  # type: ignore[arg-type]


def test_a_logged_step_is_on_disk_at_the_end_of_the_first_step_past_flush_every(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """every=100: step 0 is logged; the clock passes flush_every during step 1, which is not logged."""
    now = [0.0]
    clock = SimpleNamespace(monotonic=lambda: now[0])
    monkeypatch.setattr("hookscope.train.watch.time", clock)
    monkeypatch.setattr("hookscope.train.watch_store.time", clock)
    model, opt = _small()
    out = tmp_path / "run.hookscope"
    with hookscope.watch(model, opt, every=100, out=out, flush_every=5.0):
        _step(model, opt)  # step 0, logged at 0 s: the store was written at 0 s, so not yet
        assert hookscope.load(out).history("0").steps == []
        now[0] = 5.5
        _step(model, opt)  # step 1 ends 5.5 s after the last write: step 0's row goes to disk
        run = hookscope.load(out)
        assert run.history("0").steps == [0] and run.config["steps"] == 2 and run.manifest["status"] == "running"
        now[0] = 20.0
        _step(model, opt)  # nothing logged since: no write
        assert hookscope.load(out).config["steps"] == 2
    assert hookscope.load(out).config["steps"] == 3
