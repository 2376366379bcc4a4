"""A run that fails: the first batch failing leaves no store behind; a later one keeps what finished."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope
from hookscope.store.format import done_batches


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU())


def test_a_first_batch_that_fails_leaves_no_store(tmp_path: Path) -> None:
    out = tmp_path / "run.hookscope"
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        hookscope.extract(model(), [torch.randn(2, 5)], out=out, progress=False)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    run = hookscope.extract(model(), [torch.randn(2, 4)], out=out, progress=False)  # no force needed
    assert run.batches == [0] and run.rows == 2


@pytest.mark.parametrize("stats_only", [False, True])
def test_a_later_batch_that_fails_keeps_the_finished_ones_to_resume(tmp_path: Path, stats_only: bool) -> None:
    out = tmp_path / "run.hookscope"
    good = [torch.randn(2, 4), torch.randn(3, 4)]
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        hookscope.extract(model(), [*good, torch.randn(2, 5)], out=out, progress=False, stats_only=stats_only,
                          flush_every=1e-9)  # fmt: skip
    assert done_batches(out) == {0, 1}  # what finished before the failure is on disk
    run = hookscope.extract(model(), [*good, torch.randn(4, 4)], out=out, progress=False, stats_only=stats_only,
                            resume=True)  # fmt: skip
    assert run.batches == [0, 1, 2] and run.rows == 9
