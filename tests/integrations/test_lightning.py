"""HookscopeCallback in a real Lightning 2.6.6 Trainer: a tiny random GPT-2, accumulate_grad_batches=4,
precision="bf16-mixed"; the oracle is a hand loop of the same steps under the same autocast."""

from __future__ import annotations

import copy
import csv
from pathlib import Path
from typing import Any

import pytest
import torch

import hookscope

L = pytest.importorskip("lightning.pytorch")
transformers = pytest.importorskip("transformers")

STEPS, ACCUMULATE = 2, 4
# Lightning 2.6.6 itself uses torch's deprecated pytree LeafSpec under torch 2.14
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.* is deprecated:FutureWarning")


def _gpt2() -> Any:
    config = transformers.GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=1, n_head=2, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def _batches() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 40, (2, 8), generator=g) for _ in range(STEPS * ACCUMULATE)]


class Module(L.LightningModule):  # type: ignore[misc]
    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss: torch.Tensor = self.model(input_ids=batch, labels=batch).loss
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def _hand(model: Any) -> hookscope.Watch:
    module = Module(model)
    opt = torch.optim.SGD(module.parameters(), lr=0.5)
    batches = iter(_batches())
    with hookscope.watch(module, opt, every=1) as w:
        for _ in range(STEPS):
            for _ in range(ACCUMULATE):
                x = next(batches)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = module.model(input_ids=x, labels=x).loss
                (loss / ACCUMULATE).backward()
            opt.step()
            opt.zero_grad()
    return w


def test_lightning_callback_watches_optimizer_steps(tmp_path: Path) -> None:
    from hookscope.integrations.lightning import HookscopeCallback

    model = _gpt2()
    twin = copy.deepcopy(model)
    module = Module(model)
    callback = HookscopeCallback(every=1, out=tmp_path / "run.hookscope")
    trainer = L.Trainer(
        max_steps=STEPS, accumulate_grad_batches=ACCUMULATE, precision="bf16-mixed", accelerator="cpu", devices=1,
        callbacks=[callback], logger=L.loggers.CSVLogger(tmp_path, name="csv"), enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
    )  # fmt: skip
    loader = torch.utils.data.DataLoader(_batches(), batch_size=None)
    trainer.fit(module, loader)
    w = callback.watch
    assert w is not None and w.steps == trainer.global_step == STEPS
    assert hookscope.find_hooks(module) == []
    reference = _hand(twin)
    for name, history in reference.histories().items():
        torch.testing.assert_close(w.history(name).rows, history.rows, rtol=2e-3, atol=1e-6, equal_nan=True)
    run = hookscope.load(tmp_path / "run.hookscope")
    assert [s for s, _ in run.scalars()["loss"]] == list(range(STEPS))
    assert hookscope.build_training_report(run).charts[0].title == "Loss"
    (metrics,) = tmp_path.glob("csv/*/metrics.csv")
    rows = list(csv.DictReader(metrics.read_text().splitlines()))
    key = "hookscope/model.transformer.wte/grad_norm"  # the embedding holds the weight lm_head is tied to
    logged = [float(r[key]) for r in rows if r.get(key)]
    assert logged == pytest.approx(w.history("model.transformer.wte")["grad_norm"], rel=1e-5)


def test_lightning_callback_leaves_no_hook_when_training_raises(tmp_path: Path) -> None:
    from hookscope.integrations.lightning import HookscopeCallback

    class Broken(Module):
        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            if batch_idx == 1:
                raise RuntimeError("broken batch")
            return super().training_step(batch, batch_idx)

    module = Broken(_gpt2())
    callback = HookscopeCallback(every=1)
    trainer = L.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, callbacks=[callback], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    with pytest.raises(RuntimeError, match="broken batch"):
        trainer.fit(module, torch.utils.data.DataLoader(_batches(), batch_size=None))
    assert hookscope.find_hooks(module) == [] and callback.session.closed
