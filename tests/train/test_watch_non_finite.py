"""A run nan_guard ended keeps its NonFiniteError in the watch store: read back, in `hookscope info`, on the page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import hookscope
from hookscope.cli import main
from hookscope.errors import NonFiniteError, StoreError

FIELDS = ("step", "phase", "module", "call", "kind", "key", "value", "count", "numel", "input_absmax", "rank")


class Normalize(nn.Module):
    """x / |x| per row: a row of zeros is 0 / 0, NaN in each of its 4 features."""

    def forward(self, x: Tensor) -> Tensor:
        return x / x.norm(dim=1, keepdim=True)


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory) -> tuple[NonFiniteError, Path]:
    """watch(every=10) around nan_guard; at step 57 the batch's row 2 is all zeros: 0 / 0 in Normalize ('0')."""
    torch.manual_seed(0)
    model = nn.Sequential(Normalize(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tmp_path_factory.mktemp("ended") / "run.hookscope"
    with pytest.raises(NonFiniteError) as raised:
        _train(model, opt, out)
    return raised.value, out


def _train(model: nn.Module, opt: torch.optim.Optimizer, out: Path) -> None:
    with hookscope.watch(model, opt, every=10, out=out), hookscope.nan_guard(model, opt):
        for step in range(80):
            x = torch.randn(6, 4)
            x[2] = 0.0 if step == 57 else x[2]
            loss = F.cross_entropy(model(x), torch.randint(0, 3, (6,)))
            opt.zero_grad()
            loss.backward()
            opt.step()


def test_the_store_keeps_the_error_that_ended_the_run(ended: tuple[NonFiniteError, Path]) -> None:
    err, out = ended
    # by hand: step 57, the forward output of Normalize's only call, 4 of 6 x 4 elements 0 / 0 = NaN
    assert (err.step, err.phase, err.module, err.call, err.kind, err.key) == (57, "forward", "0", 0, "output", "out")
    assert (err.value, err.count, err.numel, err.rank) == ("nan", 4, 24, None)
    run = hookscope.load(out)
    kept = run.non_finite
    assert isinstance(kept, NonFiniteError) and str(kept) == str(err)
    assert {f: getattr(kept, f) for f in FIELDS} == {f: getattr(err, f) for f in FIELDS}
    assert run.config["ended"] == "by NonFiniteError" and run.config["steps"] == 57


def test_hookscope_info_names_it(ended: tuple[NonFiniteError, Path], capsys: Any) -> None:
    err, out = ended
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ended by  NonFiniteError at step 57, forward, '0' call 0, output out\n" in text
    assert str(err) in text


def test_the_page_shows_the_red_banner_and_never_calls_the_run_finite(
    ended: tuple[NonFiniteError, Path], tmp_path: Path
) -> None:
    err, out = ended
    assert main(["report", "--from", str(out), "--out", str(tmp_path / "page")]) == 0
    html = (tmp_path / "page" / "index.html").read_text()
    banner = html[html.index('<div class="origin" id="first-non-finite">') :]
    banner = banner[: banner.index("</div>")]
    head = "<b>First non-finite value:</b> <code>0</code> at step 57, forward, call 0, output <code>out</code>"
    assert head in banner and "nan_guard</code> found it where it was produced" in banner
    assert "every value was finite" not in html
    assert "the run ended on the non-finite value above" in html
    report = hookscope.build_training_report(hookscope.load(out))
    assert report.ended_on is not None and str(report.ended_on) == str(err)


def test_a_run_that_ended_normally_has_none(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(4, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookscope.watch(model, opt, every=1, out=tmp_path / "run.hookscope"):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    run = hookscope.load(tmp_path / "run.hookscope")
    assert run.non_finite is None and "non_finite" not in run.manifest


def test_a_damaged_record_is_a_store_error_naming_the_field(ended: tuple[NonFiniteError, Path], tmp_path: Path) -> None:
    _, out = ended
    good = json.loads((out / "manifest.json").read_text())
    good.pop("manifest_crc32")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "series.safetensors").write_bytes((out / "series.safetensors").read_bytes())
    for change, field in [
        ({"step": "57"}, r"non_finite\.step must be an integer >= 0, got '57'"),
        ({"call": -1}, r"non_finite\.call must be an integer >= 0, got -1"),
        ({"input_absmax": "big"}, r"non_finite\.input_absmax must be a number or null"),
    ]:
        manifest = {**good, "non_finite": {**good["non_finite"], **change}}
        (tmp_path / "s" / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(StoreError, match=rf"is damaged: {field}"):
            hookscope.load(tmp_path / "s")
