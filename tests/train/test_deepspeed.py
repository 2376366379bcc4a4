"""watch under DeepSpeed ZeRO stages 1 and 2 (CPU, 2 gloo ranks under torchrun) against one process of plain torch."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.errors import OptionError
from hookscope.store.history import COLUMNS
from hookscope.train.deepspeed_reads import refuse, zero_of
from tests.test_distributed import TORCHRUN, ranks_job
from tests.train.ranks_jobs import STEPS, batch, mlp

# DeepSpeed and torchrun: the jobs import DeepSpeed, this process does not (seconds of import, a process group)
needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None or not TORCHRUN.exists(), reason="DeepSpeed or torchrun is missing"
)
# what each rank's half of the batch changes: its mean loss is over half the batch, units die per rank
PER_RANK = ("grad_output_norm", "dead")


def reference() -> dict[str, list[list[float]]]:
    """The rows of one process of plain torch on the whole batch, with the jobs' two parameter groups."""
    model = mlp()
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.SGD([{"params": weights, "lr": 0.1}, {"params": biases, "lr": 0.05}])
    with hookscope.watch(model, opt, every=1) as w:
        for step in range(STEPS):
            loss = model(batch(step)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {name: h.rows.tolist() for name, h in w.histories().items()}


def close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-5)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("zero")
    command = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "tests.train.deepspeed_jobs", str(out)]
    ranks_job(command, out, timeout=300)
    return out


@needs_deepspeed
def test_zero_1_and_2_on_two_ranks_log_the_numbers_of_one_process(ran: Path) -> None:
    alone = reference()
    for stage in (1, 2):
        ranks = [json.loads((ran / f"zero{stage}-rank{r}.json").read_text()) for r in (0, 1)]
        assert ranks[0]["rows"] == ranks[1]["rows"] and list(ranks[0]["rows"]) == list(alone)  # no "module."
        got = ranks[0]
        assert got["steps"] == STEPS  # one step per engine step, though DeepSpeed steps SGD once per group
        assert got["prefixed"] == got["rows"]["0"]  # the engine's name of it finds it too
        for name, rows in alone.items():
            for c, column in enumerate(COLUMNS):
                if column in PER_RANK:
                    continue
                want, seen = [r[c] for r in rows], [r[c] for r in got["rows"][name]]
                assert len(seen) == len(want) and all(map(close, seen, want)), (stage, name, column, seen, want)
        assert got["grad"] == pytest.approx(got["rows"]["0"][-1][COLUMNS.index("grad_norm")], rel=1e-5)  # DeepSpeed's
    run = hookscope.load(ran / "zero2.hookscope")  # rank 0 wrote it: the merged rows, the engine's names found too
    assert run.config["world_size"] == 2 and len(run.rank_histories()) == 2
    assert run.history("module.0").rows.tolist() == got["rows"]["0"]


@needs_deepspeed
def test_deepspeed_optimizers_watch_cannot_read_are_refused_at_entry(ran: Path) -> None:
    said = json.loads((ran / "refused-rank0.json").read_text())
    assert said["zero3"].startswith("watch cannot read DeepSpeed ZeRO-3 parameters: 'module.0.weight' is partitioned")
    assert said["bf16"].startswith("watch cannot read DeepSpeed ZeRO stage 1 with BF16_Optimizer: it keeps")
    assert json.loads((ran / "refused-rank1.json").read_text()) == said  # every rank refuses


class _Fp16Wrapper:
    """Stands for DeepSpeed's FP16_Optimizer, which a ZeRO stage 0 engine with fp16 weights steps with."""


_Fp16Wrapper.__module__ = "deepspeed.runtime.fp16.fused_optimizer"


def test_a_deepspeed_optimizer_or_partition_without_its_optimizer_is_refused() -> None:
    model = nn.Linear(3, 2)
    with pytest.raises(OptionError, match=r"^watch cannot read DeepSpeed with _Fp16Wrapper: it keeps"):
        hookscope.watch(model, _Fp16Wrapper())  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="DeepSpeed with _Fp16Wrapper"):
        refuse(model, _Fp16Wrapper())
    partitioned: Any = model.weight
    partitioned._hp_mapping = None  # what DeepSpeed's ZeRO-1/2 leaves on a parameter another rank holds
    with pytest.raises(OptionError, match=r"^Linear's parameters are partitioned by DeepSpeed ZeRO.*watch\(model_en"):
        hookscope.watch(model)
    assert zero_of(nn.Linear(3, 2), None) is None  # an ordinary model


@needs_deepspeed
def test_a_step_deepspeed_skips_on_overflow_is_skipped_not_an_update(ran: Path) -> None:
    """A bf16 ZeRO-2 engine skips the step whose gradients overflowed (fp16 does not run on DeepSpeed's CPU
    accelerator). Oracle: the same engine never running that step. Watched with no ``scaler=`` (the engine's own
    is read), the step is in ``w.skipped`` (its index is run again) and leaves nothing in the rows: not its
    activations, nor its overflowed output gradients."""
    cases = json.loads((ran / "skipped-rank0.json").read_text())
    scaler, never = cases["scaler"], cases["never"]
    assert scaler["engine_skipped"] == 1 and never["engine_skipped"] == 0
    assert scaler["steps"] == never["steps"] == STEPS and scaler["skipped"] == [1]
    assert scaler["rows"] == never["rows"]
    assert json.loads((ran / "skipped-rank1.json").read_text())["scaler"]["skipped"] == [1]
