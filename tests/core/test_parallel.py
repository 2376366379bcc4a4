"""A DataParallel model is named as the model it wraps, like a compiled one: no ``module.`` prefix
needed (it is still accepted). Oracle: the same capture of the plain model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookscope


@pytest.fixture
def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2)).eval()


def test_data_parallel_names_are_the_wrapped_models(net: nn.Module) -> None:
    wrapped = nn.DataParallel(net)  # on CPU it calls net itself; on GPUs, replicas sharing net's hooks
    assert [i.name for i in hookscope.list_modules(wrapped)] == [i.name for i in hookscope.list_modules(net)]
    x = torch.randn(2, 3, 8, 8)
    with hookscope.capture(net, ["0", "3"]) as plain:
        net(x)
    with hookscope.capture(wrapped, ["0", "module.3"]) as cap:  # the prefix, as DataParallel spells it, too
        wrapped(x)
    assert list(cap) == ["0", "3"]
    for name in ("0", "3"):
        torch.testing.assert_close(cap[name].output, plain[name].output)
    torch.testing.assert_close(hookscope.cam(wrapped, x, select="0"), hookscope.cam(net, x, select="0"))
