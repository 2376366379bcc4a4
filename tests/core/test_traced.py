"""A submodule of a torch.jit.trace'd module is never called (the trace runs one TorchScript graph):
the capture says so, not "called as module.forward(x)"."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import hookscope


def test_a_traced_submodule_is_explained_as_traced() -> None:
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.trace is deprecated in favour of torch.compile
        traced = torch.jit.trace(inner, torch.randn(1, 4))
    model = nn.Sequential(traced, nn.Linear(4, 2))
    x = torch.randn(2, 4)
    with pytest.warns(hookscope.CaptureWarning) as seen, hookscope.capture(model, ["0", "0.0", "1"]) as cap:
        model(x)
    [line] = [str(w.message) for w in seen]
    assert line.startswith("hookscope: nothing captured for '0.0': it is part of a torch.jit.trace'd")
    assert "module.forward(x)" not in line
    torch.testing.assert_close(cap["0"].output, inner(x))  # the traced module itself is captured
