"""extract(target=...): the gradient kinds of a call over a whole dataset, checked against autograd."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from hookscope.errors import OptionError, StoreError, TargetError
from hookscope.store.extract import extract
from hookscope.store.reader import load
from tests.store.test_extract import assert_equal_runs

KINDS = ("input", "output", "grad_input", "grad_output")


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3)).double()


def _batches() -> list[tuple[Tensor, Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(n, 5, generator=g, dtype=torch.float64), torch.tensor([0, 2, 1][:n])) for n in (3, 2, 3)]


def _forward(model: nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
    return model(batch[0]), batch[1]  # the target reads what forward= returns: the output and the labels


def _loss(output: tuple[Tensor, Tensor]) -> Tensor:
    return nn.functional.cross_entropy(*output, reduction="sum")


LOSS: dict[str, Any] = {"target": _loss, "forward": _forward, "progress": False}


def _by_hand(net: nn.Sequential, x: Tensor, y: Tensor) -> dict[str, tuple[Tensor, Tensor]]:
    """(output, d loss / d output) of each layer, the network written out."""
    h0 = x @ net[0].weight.T + net[0].bias
    h1 = torch.tanh(h0)
    out = h1 @ net[2].weight.T + net[2].bias
    grads = torch.autograd.grad(nn.functional.cross_entropy(out, y, reduction="sum"), [h0, h1, out])
    return {"0": (h0, grads[0]), "1": (h1, grads[1]), "2": (out, grads[2])}


def test_each_batch_holds_the_gradients_autograd_gives(tmp_path: Path) -> None:
    net, batches = _net(), _batches()
    weights = {k: v.clone() for k, v in net.state_dict().items()}
    run = extract(
        net,
        batches,
        out=tmp_path / "g",
        select=["0", "1", "2"],
        kinds=KINDS,
        target=_loss,
        forward=_forward,
        progress=False,
    )
    assert run.complete and run.batches == [0, 1, 2] and run.config["target"] == "_loss"
    for index, (x, y) in enumerate(batches):
        expected = _by_hand(net, x, y)
        for site, (output, grad) in expected.items():
            call = run.batch(index)[site].calls[0]
            torch.testing.assert_close(call.get("output"), output.detach())
            torch.testing.assert_close(call.get("grad_output"), grad)
        torch.testing.assert_close(run.batch(index)["2"].calls[0].get("grad_input"), expected["1"][1])
    assert all(p.grad is None for p in net.parameters())  # the backward pass wrote no param.grad
    assert all(torch.equal(v, weights[k]) for k, v in net.state_dict().items())


def test_a_resumed_gradient_run_equals_one_run(tmp_path: Path) -> None:
    net, batches = _net(), _batches()
    whole = extract(net, batches, out=tmp_path / "whole", kinds=KINDS, **LOSS)
    extract(net, batches[:1], out=tmp_path / "part", kinds=KINDS, **LOSS)
    resumed = extract(net, batches, out=tmp_path / "part", kinds=KINDS, **LOSS, resume=True)
    assert_equal_runs(resumed, whole)
    with pytest.raises(StoreError, match="made with target '_loss'"):  # another loss is another store
        extract(net, batches, out=tmp_path / "part", kinds=KINDS, target=lambda o: o[0].sum(), resume=True,
                forward=_forward)  # fmt: skip


def test_statistics_of_gradients_over_the_dataset(tmp_path: Path) -> None:
    net, batches = _net(), _batches()
    run = extract(net, batches, out=tmp_path / "s", select="1", kinds="grad_output", target=_loss, forward=_forward,
                  stats_only=True, progress=False)  # fmt: skip
    grads = torch.cat([_by_hand(net, x, y)["1"][1] for x, y in batches])
    stats = load(tmp_path / "s").statistics()[("1", "grad_output", "out")]
    assert stats.count == grads.numel() and run.complete
    assert stats.mean == pytest.approx(grads.mean().item(), rel=1e-9)
    assert stats.var == pytest.approx(grads.var(unbiased=False).item(), rel=1e-6)


def test_what_a_gradient_run_refuses_says_how_to_fix_it(tmp_path: Path) -> None:
    net, batches = _net(), _batches()
    with pytest.raises(OptionError, match=r"forward kinds .*pass target=fn\(output\)"):
        extract(net, batches, out=tmp_path / "a", kinds=("output", "grad_output"), progress=False)
    with pytest.raises(OptionError, match="a parameter's gradient per batch"):
        extract(net, batches, out=tmp_path / "b", kinds=("param_grad",), **LOSS)
    with pytest.raises(TargetError, match=r"returned shape \(3, 3\); return \(3,\), one value per row, or \(\)"):
        extract(net, batches, out=tmp_path / "c", kinds="grad_output", target=lambda o: o, progress=False)
    with pytest.raises(OptionError, match=r"no \.detach"):
        extract(net, batches, out=tmp_path / "d", kinds="grad_output", target=lambda o: o.detach().sum(),
                progress=False)  # fmt: skip
    frozen = _net().requires_grad_(False)
    with pytest.raises(OptionError, match="trainable parameters"):
        extract(frozen, batches, out=tmp_path / "e", kinds="grad_output", **LOSS)
    assert not any((tmp_path / name).exists() for name in "abe")  # refused before the store was made


def test_the_old_contract_output_and_batch_still_works_with_a_warning(tmp_path: Path) -> None:
    """``target(output, batch)`` (before the one contract) gives the gradients of the new spelling."""
    net, batches = _net(), _batches()
    new = extract(net, batches, out=tmp_path / "new", kinds=KINDS, **LOSS)
    with pytest.warns(DeprecationWarning, match=r"extract\(target=fn\(output, batch\)\) is deprecated.*forward="):
        old = extract(net, batches, out=tmp_path / "old", kinds=KINDS, progress=False,
                      target=lambda out, b: nn.functional.cross_entropy(out, b[1], reduction="sum"))  # fmt: skip
    assert_equal_runs(old, new)
    x, y = batches[0]
    torch.testing.assert_close(new.batch(0)["2"].calls[0].get("grad_output"), _by_hand(net, x, y)["2"][1])


def test_the_manifest_names_the_target_and_an_older_store_says_loss(tmp_path: Path) -> None:
    import json

    net, batches = _net(), _batches()
    extract(net, batches[:1], out=tmp_path / "s", kinds=KINDS, **LOSS)
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert manifest["config"]["target"] == "_loss" and "loss" not in manifest["config"]
    older = load(Path(__file__).parent / "data" / "v1.hookscope")  # written with "loss": null
    assert older.config["target"] is None and older.config["loss"] is None
