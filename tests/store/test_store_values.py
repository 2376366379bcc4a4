"""A store gives the same structured answer as the live capture it came from (save and extract)."""

from __future__ import annotations

import dataclasses
import json

import torch
from torch import nn

import hookscope
from hookscope.core.layout import from_json, to_json
from hookscope.core.tree import flatten_layout, rebuild
from tests.core.test_values import STRUCTURES, Out, Returns, assert_same


def test_saved_store_rebuilds_every_structure(tmp_path):
    """For each structure of the live tests, run[site].output equals cap[site].output, type and all."""
    torch.manual_seed(0)
    net = nn.Sequential(*(Returns(make) for make in STRUCTURES.values()))
    net.forward = lambda x: [m(x) for m in net]  # type: ignore[method-assign]  # every child on the same x
    with hookscope.capture(net, [str(i) for i in range(len(STRUCTURES))], kinds=("input", "output")) as cap:
        net(torch.randn(2, 3))
    run = hookscope.save(cap, tmp_path / "s.hookscope")
    for site in cap:
        assert_same(run[site].output, cap[site].output)
        assert torch.equal(run[site].input, cap[site].input)


def test_extracted_store_rebuilds_per_batch(tmp_path):
    """extract over batches: each call's ModelOutput/dict comes back with that batch's values;
    one layout is listed once in the manifest however many batches share it."""
    torch.manual_seed(0)
    net = nn.Sequential(Returns(STRUCTURES["model_output"]), nn.Identity())
    loader = [torch.randn(2, 3) for _ in range(4)]
    run = hookscope.extract(net, loader, select="0", out=tmp_path / "e.hookscope", progress=False)
    for b, x in enumerate(loader):
        assert_same(run["0"].calls[b].output, net[0](x))
        assert_same(run.batch(b)["0"].output, net[0](x))
    manifest = json.loads((tmp_path / "e.hookscope" / "manifest.json").read_text())
    assert len(manifest["layouts"]) == 1


def test_lstm_structure_survives_the_store(tmp_path):
    """nn.LSTM's (out, (h, c)) and its gradients with a None where none arrived, from disk."""
    torch.manual_seed(0)
    lstm = nn.LSTM(3, 4, batch_first=True)
    with hookscope.capture(lstm, "", kinds=("output", "grad_output")) as cap:
        out, (h, _) = lstm(torch.randn(2, 5, 3))
        (out.sum() + h.sum()).backward()
    run = hookscope.save(cap, tmp_path / "l.hookscope")
    assert_same(run[""].output, cap[""].output)
    grad_out, (grad_h, grad_c) = run[""].grad_output
    assert torch.equal(grad_out, cap[""].grad_output[0]) and torch.equal(grad_h, cap[""].grad_output[1][0])
    assert grad_c is None


def test_a_class_that_is_not_imported_comes_back_plain():
    """A layout read back names a class whose module is not imported (or is no container of that form):
    nothing is imported or called; a plain dataclass of the same name and fields stands in."""
    h = torch.ones(2)
    leaves, layout = flatten_layout(Out(logits=h, hidden=None, name="n", step=4))
    data = to_json(layout)
    for path in ("not_a_module_anyone_has:Out", "os:system", "builtins:print"):
        got = rebuild(from_json({**data, "c": path}), dict(leaves))
        assert type(got).__name__ == ("Out" if path.endswith("Out") else path.rsplit(":")[-1])
        assert dataclasses.is_dataclass(got) and got.step == 4 and torch.equal(got.logits, h)
    assert type(rebuild(from_json(data), dict(leaves))) is Out  # its module is imported: the class itself
