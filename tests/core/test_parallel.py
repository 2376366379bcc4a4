"""A DataParallel model is named as the model it wraps, like a compiled one: no ``module.`` prefix
needed (it is still accepted). Oracle: the same capture of the plain model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

import hookscope
from hookscope.core.store_sites import select_sites


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


def test_the_names_a_wrapper_shows_find_every_site(net: nn.Module, tmp_path: Path) -> None:
    """``module.3``, as ``DataParallel(net).named_modules()`` spells it, finds site ``3`` in a capture and its store."""
    wrapped = nn.DataParallel(net)
    assert "module.3" in dict(wrapped.named_modules())
    with hookscope.capture(wrapped, "3") as cap:
        wrapped(torch.randn(2, 3, 8, 8))
    assert cap["module.3"] is cap["3"]
    hookscope.save(cap, tmp_path / "dp.hookscope")
    run = hookscope.load(tmp_path / "dp.hookscope")
    torch.testing.assert_close(run["module.3"].output, cap["3"].output)
    torch.testing.assert_close(run.batch(run.batches[0])["module.3"].output, cap["3"].output)
    with pytest.raises(hookscope.NotCapturedError, match=r"'module\.9' is not a site"):
        run["module.9"]
    assert select_sites(run.site_types(), ["module.3", "module.*"], source="a store") == ["3"]
    assert select_sites({"module.3": "Linear", "3": "Linear"}, "module.3", source="a store") == ["module.3"]


def test_ddp_names_find_watched_modules_and_nan_guard_findings(tmp_path: Path) -> None:
    """Under DDP (a world of one), ``w.history("module.0")`` is ``w.history("0")``, in the watch and its store,
    and a nan_guard finding's module is found under both names."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2)))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        with hookscope.watch(ddp, opt, every=1, out=tmp_path / "w.hookscope") as w:
            ddp(torch.randn(3, 4)).sum().backward()
            opt.step()
        assert w.history("module.0").rows.tolist() == w.history("0").rows.tolist()
        assert w.histories()["module.0"].name == "0"
        run = hookscope.load(tmp_path / "w.hookscope")
        assert run.history("module.2").rows.tolist() == w.history("2").rows.tolist()
        assert run.histories()["module.2"].name == "2"
        with torch.no_grad():
            ddp.module[2].weight[0, 0] = math.nan
        with pytest.raises(hookscope.NonFiniteError) as found, hookscope.nan_guard(ddp, opt, select="module.2"):
            ddp(torch.randn(3, 4))
        assert found.value.module == "2" and w.history(f"module.{found.value.module}").name == "2"
    finally:
        dist.destroy_process_group()
