"""HookscopeCallback in a real Hugging Face Trainer (transformers 5.x, accelerate 1.16.0) on a tiny random BERT.

Every batch holds the same examples, so the Trainer's shuffling cannot change them and a hand loop of
the same SGD steps is the oracle: the callback's histories equal a plain ``watch`` over that loop.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

import hookscope

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

STEPS, BATCH = 3, 4


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "TRANSFORMERS_OFFLINE": "1"}.items():
        monkeypatch.setenv(name, value)


def _bert() -> Any:
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=2,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(config)


class Same(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``n`` copies of one batch's rows, in batch order: any shuffle of whole batches is the same data."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 50, (BATCH, 8), generator=g)
        self.labels = torch.tensor([0, 1, 1, 0])
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[0], "labels": self.labels[0]}


def _hand(model: Any, accumulate: int) -> hookscope.Watch:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = Same(1).ids[:1].expand(BATCH, -1), Same(1).labels[:1].expand(BATCH)
    with hookscope.watch(model, opt, every=1) as w:
        for _ in range(STEPS):
            for _ in range(accumulate):
                model(input_ids=x, labels=y).loss.backward()  # the Trainer sums micro-batches (its logged loss too)
            opt.step()
            opt.zero_grad()
    return w


@pytest.mark.parametrize("accumulate", [1, 4])
def test_trainer_callback_watches_optimizer_steps(tmp_path: Path, accumulate: int) -> None:
    from hookscope.integrations import HookscopeCallback

    model = _bert()
    twin = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH, max_steps=STEPS, logging_steps=1,
        gradient_accumulation_steps=accumulate, max_grad_norm=0.0, report_to=[], use_cpu=True, save_strategy="no",
        disable_tqdm=True, lr_scheduler_type="constant", seed=0,
    )  # fmt: skip
    callback = HookscopeCallback(every=1, out=tmp_path / "run.hookscope")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Same(BATCH * accumulate * STEPS),
                                   optimizers=(opt, None), callbacks=[callback])  # fmt: skip
    trainer.train()
    w = callback.watch
    assert w is not None and w.steps == trainer.state.global_step == STEPS
    assert hookscope.find_hooks(model) == []
    reference = _hand(twin, accumulate)
    for name, history in reference.histories().items():
        torch.testing.assert_close(w.history(name).rows, history.rows, rtol=1e-4, atol=1e-7, equal_nan=True)
    run = hookscope.load(tmp_path / "run.hookscope")
    losses = run.scalars()["loss"]
    assert [s for s, _ in losses] == list(range(STEPS))
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert [v for _, v in losses] == pytest.approx(logged)
    assert [s for s, _ in run.scalars()["lr"]] == list(range(STEPS))
    report = hookscope.build_training_report(run)
    assert report.charts[0].title == "Loss"


class Recorder(transformers.TrainerCallback):  # type: ignore[misc]
    """A tracker after the hookscope callback: keeps the logs it is given."""

    def __init__(self) -> None:
        self.logs: list[dict[str, Any]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        self.logs.append(dict(logs))


def test_trainer_callback_writes_alerts_into_the_trainers_logs(tmp_path: Path) -> None:
    from hookscope.integrations import HookscopeCallback

    model = _bert()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH, max_steps=STEPS, logging_steps=1,
        max_grad_norm=0.0, report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True, seed=0,
    )  # fmt: skip
    # every gradient norm over 1e-3 is "exploding": alerts fire at step 0
    callback = HookscopeCallback(every=1, thresholds={"exploding": 1e-3, "patience": 1})
    recorder = Recorder()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Same(BATCH * STEPS),
                                   optimizers=(opt, None), callbacks=[callback, recorder])  # fmt: skip
    trainer.train()
    alerts = callback.watch.alerts if callback.watch is not None else []
    assert alerts and {a.step for a in alerts} == {0}
    by_step = {h["step"]: h for h in trainer.state.log_history if "loss" in h}
    for alert in alerts:  # the Trainer's step of the watch's step 0 is 1
        assert by_step[alert.step + 1][f"hookscope/{alert.kind}/{alert.module}"] == alert.value
    assert [by_step[s]["hookscope/alerts"] for s in (1, 2, 3)] == [len(alerts)] * 3
    assert recorder.logs[0][f"hookscope/exploding/{alerts[0].module}"] == alerts[0].value
