"""watch and nan_guard under torchrun (2 ranks, gloo): DDP, FSDP2 and tensor parallelism against one process."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.cli import main
from hookscope.core.placement import refuse_zero3, replicas
from hookscope.errors import NonFiniteError, OptionError
from hookscope.store.history import COLUMNS
from hookscope.train.collect import SLOTS
from hookscope.train.lockstep import first
from hookscope.train.measures import activation_moments
from hookscope.train.rank_sums import merge
from tests.test_distributed import TORCHRUN, ranks_job
from tests.train.ranks_jobs import SETUPS, batch, mlp, reference

needs_torchrun = pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed beside this Python")


def launch(what: str, out: Path) -> None:
    """One torchrun of two ranks (``tests.test_distributed.ranks_job``: a hang fails at the timeout)."""
    command = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "tests.train.ranks_jobs", what, str(out)]
    ranks_job(command, out, timeout=150)


def close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One torchrun of two ranks for every setup and case (each launch costs seconds of start-up)."""
    out = tmp_path_factory.mktemp("ranks")
    launch("all", out)
    return out


@needs_torchrun
def test_watch_under_ddp_fsdp2_and_tensor_parallel_logs_the_numbers_of_one_process(
    ran: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp_path = ran
    alone = reference()  # one process, the whole batch: the numbers every setup must log
    for setup in SETUPS:
        ranks = [json.loads((tmp_path / f"{setup}-rank{r}.json").read_text()) for r in (0, 1)]
        assert ranks[0]["rows"] == ranks[1]["rows"] and ranks[0]["alerts"] == ranks[1]["alerts"]  # the same rows
        scale = 1.0 if setup == "tp" else 2.0  # each DDP / FSDP2 / HSDP rank's mean loss is over half the batch
        for name, rows in alone.items():
            for c, column in enumerate(COLUMNS):
                got, want = [r[c] for r in ranks[0]["rows"][name]], [r[c] for r in rows]
                if column == "grad_output_norm":
                    want = [scale * v for v in want]
                if column != "dead" or setup == "tp":
                    assert all(map(close, got, want)), (setup, name, column, got, want)
    warned = json.loads((tmp_path / "tp-rank0.json").read_text())["warned"]
    assert len(warned) == 1 and "'0' is a tensor-parallel shard" in warned[0] and "local (8, 6) of (16, 6)" in warned[0]
    assert "tensor (8, 8)" in warned[0] and ".full_tensor()" in warned[0]  # the column-parallel layer only

    run = hookscope.load(tmp_path / "ddp.hookscope")  # rank 0 wrote it, with each rank's own rows
    own = run.rank_histories()
    assert run.config["world_size"] == 2 and len(own) == 2
    merged = json.loads((tmp_path / "ddp-rank0.json").read_text())["rows"]
    for name, history in run.histories().items():
        rows = torch.tensor(merged[name], dtype=torch.float64)
        torch.testing.assert_close(history.rows, rows, rtol=0, atol=0, equal_nan=True)
        halves = zip(own[0][name]["dead"], own[1][name]["dead"], strict=True)
        assert history["dead"] == pytest.approx([(a + b) / 2 for a, b in halves])  # the mean of the ranks' own
    assert own[0]["0"]["act_mean"] != own[1]["0"]["act_mean"]  # each rank its own half of the batch
    page = hookscope.build_training_report(run)
    assert page.ranks == 2 and "<b>2</b> ranks, statistics merged over them" in hookscope.render_html(page)
    assert main(["info", str(tmp_path / "ddp.hookscope")]) == 0
    assert "ranks     2 under torchrun: statistics merged over the ranks" in capsys.readouterr().out


@needs_torchrun
def test_nan_guard_stops_every_rank_at_the_same_step(ran: Path) -> None:
    tmp_path = ran
    for case, (phase, module, key, rank) in {
        "batch": ("forward", "", "args[0]", 1),  # a NaN in rank 1's batch: the data, on rank 1
        "shard": ("forward", "2", "out", 0),  # a NaN in the weight piece rank 1 holds: both ranks' '2' output
        "step": ("optimizer", "2", "weight", 1),  # rank 1's piece of 2.weight overflowed in its step
    }.items():
        raised = [json.loads((tmp_path / f"{case}-rank{r}.json").read_text()) for r in (0, 1)]
        assert raised[0] == raised[1], case  # every rank raised the same finding
        got = raised[0]
        assert (got["step"], got["phase"], got["module"], got["key"], got["rank"]) == (1, phase, module, key, rank)
        assert got["message"].startswith(f"rank {rank} of 2: step 1, {phase}")
    assert "rank 1 found:" in raised[0]["message"] or case != "shard"
    shard = json.loads((tmp_path / "shard-rank0.json").read_text())["message"]
    assert "rank 1 found:" in shard and "its own parameters are already non-finite (weight)" in shard


@needs_torchrun
def test_captures_of_dtensors_are_named_and_saved_as_pieces(ran: Path) -> None:
    """A tensor-parallel capture warns about its column-parallel piece; FSDP2's gradients save as each rank's shard."""
    seen = [json.loads((ran / f"capture-rank{r}.json").read_text()) for r in (0, 1)]
    for rank, got in enumerate(seen):
        capture_notes = [w for w in got["warned"] if w.startswith("hookscope.capture")]
        assert len(capture_notes) == 1 and "'0' is a tensor-parallel shard" in capture_notes[0]
        assert f"its output on rank {rank} is this rank's piece" in capture_notes[0]
        assert any(w.startswith("hookscope.store.save: 2 captured tensors are DTensors") for w in got["warned"])
        assert got["shapes"] == {"0": [8, 8], "2": [8, 16]}  # half the columns of '0'; '2' whole (all-reduced)
    model = mlp()  # the oracle: one process, the whole batch
    model(batch(0)).square().mean().backward()
    assert model[0].weight.grad is not None
    pieces = [hookscope.load(ran / f"grads-rank{r}.hookscope")["0"].param_grad["weight"] for r in (0, 1)]
    assert [tuple(p.shape) for p in pieces] == [(8, 6), (8, 6)]
    torch.testing.assert_close(torch.cat(pieces), model[0].weight.grad, rtol=1e-5, atol=1e-7)


def test_merging_ranks_gives_the_statistics_of_the_whole() -> None:
    """Two ranks' halves of a batch merge to the whole batch's moments; a replicated one counts once."""
    x = torch.randn(8, 5, dtype=torch.float64)

    def slots(part: torch.Tensor, grad_sq: float) -> list[float]:
        act = activation_moments(part, 1)[0].tolist()
        return [*act, part.square().sum().item(), grad_sq, 1.0, 0.5, 2.0, 0.25]

    merged = dict(zip(SLOTS, merge([slots(x[:3], 1.0), slots(x[3:], 2.0)]), strict=True))
    whole = dict(zip(SLOTS, slots(x, 0.0), strict=True))
    for name in ("count", "mean", "m2", "sum_abs", "zeros", "grad_output_sq"):
        assert merged[name] == pytest.approx(whole[name], rel=1e-12)
    assert merged["grad_sq"] == 3.0 and merged["weight_sq"] == 2.0  # shares, added
    same = dict(zip(SLOTS, merge([slots(x, 1.0), slots(x, 1.0)]), strict=True))  # a replicated activation
    assert same["count"] == 40 and same["m2"] == pytest.approx(whole["m2"]) and same["grad_sq"] == 2.0


def test_a_plain_tensor_is_one_replica_per_rank() -> None:
    assert replicas(torch.ones(3), 1) == 1 and replicas(torch.ones(3), 4) == 4


def test_the_first_finding_of_the_ranks_is_raised_with_the_others_named() -> None:
    late = NonFiniteError("step 2, forward: late", step=2, phase="forward", rank=0)
    grad = NonFiniteError("step 1, backward: grad", step=1, phase="backward", rank=0)
    data = NonFiniteError("step 1, forward: data", step=1, phase="forward", module="", rank=1)
    err = first([late, grad, data], 2)
    assert (err.step, err.phase, err.rank) == (1, "forward", 1)
    assert str(err).startswith("rank 1 of 2: step 1, forward: data; rank 0 found: step 1, backward: grad")


def test_deepspeed_zero3_parameters_are_refused() -> None:
    model = nn.Linear(3, 2)
    hidden: Any = nn.Parameter(torch.empty(0))
    hidden.ds_id, hidden.ds_shape = 0, (2, 3)  # what DeepSpeed ZeRO-3 leaves of a partitioned parameter
    model.weight = hidden
    for open_block in (hookscope.watch, hookscope.nan_guard):
        with pytest.raises(OptionError, match="DeepSpeed ZeRO-3 parameters: 'weight' is partitioned away"):
            open_block(model)
    refuse_zero3(nn.Linear(3, 2), "watch")  # an ordinary model passes
