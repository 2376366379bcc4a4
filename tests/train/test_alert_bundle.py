"""watch(evidence=) and nan_guard(evidence=): the first alert or finding as a bundle, and its reproducer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import hookscope
from hookscope.cli import main
from hookscope.evidence.bundle import validate_bundle

NAN_MODEL = """\
from torch import nn


class Standardize(nn.Module):  # divides by each feature's spread over the batch: zero if the rows are equal
    def forward(self, x):
        return (x - x.mean(0)) / x.std(0)


def build():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), Standardize(), nn.Linear(8, 1))
"""


def _nan_run(folder: Path, monkeypatch: pytest.MonkeyPatch, **options: object) -> hookscope.NonFiniteError:
    """docs/guide/nan-guard.md's example, its model in a module of ``folder``, under nan_guard(**options)."""
    (folder / "nan_model.py").write_text(NAN_MODEL)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "nan_model", raising=False)
    from nan_model import build

    torch.manual_seed(0)
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [torch.randn(16, 4) for _ in range(3)] + [torch.ones(16, 4)]  # the last: 16 equal rows

    def train() -> None:
        with hookscope.nan_guard(model, opt, **options):  # type: ignore[arg-type]
            for x in batches:
                loss = model(x).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()

    with pytest.raises(hookscope.NonFiniteError) as raised:
        train()
    assert hookscope.find_hooks(model, optimizer=opt) == []
    return raised.value


def test_the_nan_bundle_names_the_producer_and_its_script_raises_the_same_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "nan-evidence"
    err = _nan_run(tmp_path, monkeypatch, evidence=out, factory="nan_model:build")
    assert validate_bundle(out) == []
    manifest = json.loads((out / "manifest.json").read_text())
    finding = manifest["finding"]
    assert (finding["module"], finding["step"], finding["phase"], finding["kind"]) == ("2", 3, "forward", "output")
    assert finding["message"] == str(err) and finding["numbers"]["count"] == 128
    [received], [made] = manifest["ranges"]["inputs"], manifest["ranges"]["outputs"]
    x = torch.ones(16, 4)
    model = __import__("nan_model").build()
    model.load_state_dict(torch.load(out / "state.pt", weights_only=True))
    tanh = model[1](model[0](x)).detach()
    assert (received["min"], received["max"]) == pytest.approx((float(tanh.min()), float(tanh.max())))
    assert (made["nan"], made["min"]) == (128, None)
    assert sorted(manifest["files"]) == ["batch.pt", "reproduce.py", "state.pt"]
    env = {**os.environ, "PYTHONPATH": str(Path(hookscope.__file__).parents[1])}
    done = subprocess.run([sys.executable, str(out / "reproduce.py")], capture_output=True, text=True, cwd="/",
                          env=env, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == f"hookscope.errors.NonFiniteError: {err}"


def test_without_a_factory_the_bundle_says_why_there_is_no_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    _nan_run(tmp_path, monkeypatch, evidence=out)
    reproducer = json.loads((out / "manifest.json").read_text())["reproducer"]
    assert reproducer["script"] is None and reproducer["why"].startswith("no factory= was given")
    assert reproducer["batch"] == "batch.pt" and validate_bundle(out) == []
    args, kwargs = torch.load(out / "batch.pt", weights_only=True)
    assert torch.equal(args[0], torch.ones(16, 4)) and kwargs == {}


def test_bad_evidence_options_are_refused_before_training(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(hookscope.OutputExistsError, match="taken"):
        hookscope.nan_guard(model, evidence=tmp_path / "taken")
    with pytest.raises(hookscope.OptionError, match="pass evidence=DIR too"):
        hookscope.nan_guard(model, factory="m:f")
    with pytest.raises(hookscope.OptionError, match=r"factory= is 'module:function'.*got 'build'"):
        hookscope.nan_guard(model, evidence=tmp_path / "b", factory="build")
    with pytest.raises(hookscope.OutputExistsError, match="taken"):
        hookscope.watch(model, evidence=tmp_path / "taken")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_the_dead_units_alert_bundle_has_the_dead_fraction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/guide/watch.md's example: 20 of 32 ReLUs can never fire."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    with torch.no_grad():
        model[0].bias[:20] = -50.0
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    out = tmp_path / "dead-evidence"
    with hookscope.watch(model, opt, every=5, evidence=out) as w:
        for _ in range(30):
            loss = F.cross_entropy(model(torch.randn(16, 8)), torch.randint(0, 3, (16,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert validate_bundle(out) == []
    manifest = json.loads((out / "manifest.json").read_text())
    finding, first = manifest["finding"], w.alerts[0]
    assert (finding["module"], finding["kind"], finding["step"]) == ("1", "dead", 10) == (first.module, first.kind, 10)
    assert finding["numbers"] == {"column": "dead", "value": 0.625, "bound": 0.5}
    assert finding["thresholds"]["dead"] == 0.5
    rows = manifest["last_rows"]
    assert [r["step"] for r in rows] == [0, 5, 10] and rows[-1]["dead"] == 0.625 == w.history("1").row(10)["dead"]
    assert manifest["reproducer"]["script"] is None and manifest["reproducer"]["batch"] is None
    state = torch.load(out / "state.pt", weights_only=True)
    assert hookscope.store.save.weights_hash(model) != manifest["reproducer"]["weights_sha256"]  # trained on after
    assert sorted(state) == sorted(model.state_dict())
    assert main(["info", str(out)]) == 0
    assert "watch: dead at `1`, step 10, logged" in capsys.readouterr().out


def test_a_bundle_that_cannot_be_written_warns_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while the bundle is written: the NonFiniteError is still what the loop sees."""
    from hookscope.train import alert_bundle

    def full(folder: Path, kind: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(alert_bundle, "mark", full)
    with pytest.warns(hookscope.HookscopeWarning, match=r"cannot write the evidence bundle .*No space left"):
        err = _nan_run(tmp_path, monkeypatch, evidence=tmp_path / "b", factory="nan_model:build")
    assert err.module == "2"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["nan_model.py"]


ROOT_MODEL = """\
import torch
from torch import nn


class Root(nn.Module):  # x + sqrt(0): forward x, backward inf - inf = nan
    def forward(self, x):
        return x + (x - x).sqrt()


def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), Root(), nn.Linear(8, 1))
"""


def test_a_backward_finding_is_replayed_with_the_gradient_at_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "root_model.py").write_text(ROOT_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "root_model", raising=False)
    from root_model import build

    model, out = build(), tmp_path / "b"
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 4)

    def train() -> None:
        with hookscope.nan_guard(model, opt, evidence=out, factory="root_model:build"):
            loss = model(x).square().mean()
            loss.backward()

    with pytest.raises(hookscope.NonFiniteError) as raised:
        train()
    err = raised.value
    assert (err.phase, err.module, err.kind) == ("backward", "1", "grad_input")
    manifest = json.loads((out / "manifest.json").read_text())
    assert validate_bundle(out) == [] and manifest["reproducer"]["grad"] == "grad.pt"
    with torch.no_grad():
        y = model(x)
    grad = torch.load(out / "grad.pt", weights_only=True)
    assert torch.allclose(grad, 2 * y / y.numel())  # d mean(y^2) / dy, by hand
    env = {**os.environ, "PYTHONPATH": str(Path(hookscope.__file__).parents[1])}
    done = subprocess.run([sys.executable, str(out / "reproduce.py")], capture_output=True, text=True, cwd="/",
                          env=env, timeout=120, check=False)  # fmt: skip
    assert done.stderr.strip().splitlines()[-1] == f"hookscope.errors.NonFiniteError: {err}"
