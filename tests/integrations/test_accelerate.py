"""watch_accelerate in a real Accelerate 1.16.0 loop with gradient accumulation on a tiny random BERT; the oracle
is a hand loop of the same steps, and ``accelerator.log`` is read back through a tracker of our own."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

import hookscope

accelerate = pytest.importorskip("accelerate")
transformers = pytest.importorskip("transformers")

STEPS, ACCUMULATE = 3, 2


def _bert() -> Any:
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=2,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(config)


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, 50, (4, 8), generator=g), torch.randint(0, 2, (4,), generator=g))
            for _ in range(STEPS * ACCUMULATE)]  # fmt: skip


class Tracker(accelerate.tracking.GeneralTracker):  # type: ignore[misc]
    """An Accelerate tracker that keeps what ``accelerator.log`` gives it."""

    name, requires_logging_directory, main_process_only = "memory", False, True

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[tuple[int, dict[str, float]]] = []

    @property
    def tracker(self) -> Any:
        return self

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        pass

    def log(self, values: dict[str, float], step: int | None = None, **kwargs: Any) -> None:
        self.logged.append((int(step or 0), dict(values)))


def _hand(model: Any) -> hookscope.Watch:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = iter(_batches())
    with hookscope.watch(model, opt, every=1) as w:
        for _ in range(STEPS):
            for _ in range(ACCUMULATE):
                x, y = next(batches)
                (model(input_ids=x, labels=y).loss / ACCUMULATE).backward()
            opt.step()
            opt.zero_grad()
    return w


def test_an_accelerate_loop_is_watched_over_optimizer_steps(tmp_path: Path) -> None:
    from hookscope.integrations.accelerate import watch_accelerate

    model = _bert()
    twin = copy.deepcopy(model)
    tracker = Tracker()
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=ACCUMULATE, log_with=[tracker])
    accelerator.init_trackers("hookscope")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = accelerator.prepare(model, opt)
    with watch_accelerate(model, opt, accelerator, every=1, out=tmp_path / "run.hookscope") as w:
        for x, y in _batches():
            with accelerator.accumulate(model):
                loss = model(input_ids=x, labels=y).loss
                w.log(loss=loss)
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
    accelerator.end_training()
    assert w.steps == STEPS and hookscope.find_hooks(model) == []
    reference = _hand(twin)
    for name, history in reference.histories().items():
        torch.testing.assert_close(w.history(name).rows, history.rows, rtol=1e-4, atol=1e-7, equal_nan=True)
    run = hookscope.load(tmp_path / "run.hookscope")
    assert sorted({s for s, _ in run.scalars()["loss"]}) == list(range(STEPS))
    assert hookscope.build_training_report(run).charts[0].title == "Loss"
    grads = [v["classifier/grad_norm"] for _, v in tracker.logged if "classifier/grad_norm" in v]
    assert grads == pytest.approx(w.history("classifier")["grad_norm"], rel=1e-6)


def test_a_wrapper_without_an_optimizer_inside_names_the_fix() -> None:
    class Wrapper:
        optimizer = None

    with pytest.raises(hookscope.OptionError, match=r"got Wrapper, which has no step hooks; count steps by hand"):
        hookscope.watch(torch.nn.Linear(2, 2), Wrapper())  # type: ignore[arg-type]


def test_the_earlier_order_works_for_one_release_and_warns() -> None:
    from hookscope.integrations.accelerate import watch_accelerate

    runs = {}
    for order in ("new", "old"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3))
        accelerator = accelerate.Accelerator(cpu=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = accelerator.prepare(model, opt)
        if order == "old":
            with pytest.warns(DeprecationWarning, match=r"watch_accelerate\(accelerator, model, optimizer\) is "
                              r"deprecated .*; use watch_accelerate\(model, optimizer, accelerator\)"):  # fmt: skip
                w = watch_accelerate(accelerator, model, opt, every=1)
        else:
            w = watch_accelerate(model, opt, accelerator, every=1)
        with w:
            for _ in range(2):
                accelerator.backward(model(torch.ones(2, 4)).sum())
                opt.step()
                opt.zero_grad()
        runs[order] = w
    assert runs["old"].steps == runs["new"].steps == 2
    torch.testing.assert_close(runs["old"].history("0").rows, runs["new"].history("0").rows, rtol=0, atol=0,
                               equal_nan=True)  # fmt: skip
