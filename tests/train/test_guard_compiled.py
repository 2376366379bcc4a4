"""nan_guard of a torch.compile'd model: it runs eagerly inside the block so the guard sees every call,
says so once, and names the producer as it does for the eager model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookscope
from hookscope import CaptureWarning


class Divide(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.abs().amin()  # inf once a value reaches zero


def test_a_compiled_model_is_guarded_as_its_eager_model() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), Divide(), nn.Linear(6, 2))
    model = torch.compile(net)
    model(torch.randn(3, 4))  # compiled and run before the block
    note = r"'Sequential' is compiled; inside this nan_guard it runs eagerly"
    guard = hookscope.nan_guard(model)
    with pytest.warns(CaptureWarning, match=note), pytest.raises(hookscope.NonFiniteError) as found, guard:
        model(torch.randn(3, 4))  # the ReLU zeroes some value: Divide makes inf
    assert (found.value.phase, found.value.module, found.value.kind) == ("forward", "2", "output")
    assert hookscope.find_hooks(model) == []
