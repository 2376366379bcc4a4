"""An edit of a torch.compile'd model: it runs eagerly inside the block so the edit fires, says so once,
and runs its compiled code again afterwards (compiled with inductor on the CPU, run once before)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookscope
from hookscope import CaptureWarning, edits


def test_an_edit_of_a_compiled_model_fires_and_says_it_runs_eagerly() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    model = torch.compile(net)
    x = torch.randn(5, 4)
    plain = model(x)  # compiled and run before the block
    with torch.no_grad():
        hidden = net[0](x)
        hidden[:, [1, 4]] = 0  # the edit, by hand, on the eager network
        want = net[2](net[1](hidden))
    note = r"'Sequential' is compiled; inside this edit block it runs eagerly"
    with pytest.warns(CaptureWarning, match=note), hookscope.edit(model, {"0": edits.zero(units=[1, 4])}) as ed:
        got = model(x)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert ed.report()[0].changed > 0 and hookscope.find_hooks(model) == []
    torch.testing.assert_close(model(x), plain, rtol=0, atol=0)  # the compiled code again, unedited
