"""What the framework callbacks cost a training step, as ratios to a plain step in the same process, interleaved.

    .venv/bin/python benchmarks/integrations.py            # a random BERT (4 layers, 128 wide), batch 16 x 64
    .venv/bin/python benchmarks/integrations.py --smoke    # 1 layer, 32 wide, 3 rounds: shows that it runs

One *run* is one Hugging Face Trainer step as the Trainer makes it: ``Trainer.training_step``
(forward, loss, backward through Accelerate) and the ``AcceleratedOptimizer``'s step and zero_grad.

* ``bare``: that step in a Trainer without the callback.
* ``callback, step not logged``: with ``HookscopeCallback(every=10**9)`` begun (``on_train_begin``):
  every timed step is one between logged steps (target: at most 1.01x).
* ``callback, logged step``: ``HookscopeCallback(every=1)``: every step logged.
* ``watch alone, logged step``: ``hookscope.watch(model, optimizer, every=1)`` around the bare step:
  the callback's logged step should cost the same (no second pass over the gradients).

Prints the Markdown table, then one ``ROW {json}`` line per row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import transformers

import harness
import hookscope
from hookscope.integrations import HookscopeCallback


def trainer_step(smoke: bool, callback: Any = None, watch_every: int | None = None) -> Callable[[], Any]:
    """A step of a Trainer on a random BERT, with ``callback`` begun, or inside a plain watch."""
    width, layers, seq = (32, 1, 16) if smoke else (128, 4, 64)
    config = transformers.BertConfig(vocab_size=1000, hidden_size=width, num_hidden_layers=layers,
                                     num_attention_heads=4, intermediate_size=4 * width,
                                     max_position_embeddings=seq, num_labels=2)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    args = transformers.TrainingArguments(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], max_steps=1,
                                          disable_tqdm=True, save_strategy="no")  # fmt: skip
    trainer = transformers.Trainer(model=model, args=args, callbacks=[callback] if callback else [])
    trainer.create_optimizer_and_scheduler(num_training_steps=10**6)
    trainer.current_gradient_accumulation_steps = 1  # what Trainer.train sets before its steps
    model, opt = trainer.accelerator.prepare(trainer.model, trainer.optimizer)
    inputs = {"input_ids": torch.randint(0, 1000, (16, seq)), "labels": torch.randint(0, 2, (16,))}
    if callback is not None:
        callback.on_train_begin(args, trainer.state, trainer.control, model=model, optimizer=opt)
    if watch_every is not None:
        hookscope.watch(model, opt, every=watch_every).__enter__()

    def step() -> Any:
        trainer.training_step(model, inputs)
        opt.step()
        opt.zero_grad()

    step()  # step 0 (logged by every watch) is behind us
    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="a tiny BERT, 3 rounds: shows that it runs, not its speed")
    args = parser.parse_args(argv)
    smoke, rounds = args.smoke, 3 if args.smoke else args.rounds
    torch.set_num_threads(args.threads)
    tools = {
        "callback, step not logged": lambda: trainer_step(smoke, HookscopeCallback(every=10**9)),
        "callback, logged step": lambda: trainer_step(smoke, HookscopeCallback(every=1)),
        "watch alone, logged step": lambda: trainer_step(smoke, watch_every=1),
    }
    built = {name: make() for name, make in tools.items()}
    title = "tiny BERT" if smoke else "BERT 4x128, batch 16x64"
    rows = harness.measure(f"Trainer step, {title}", trainer_step(smoke), dict(built), rounds=rounds, memory=False)
    print(harness.table(rows))
    for row in rows:
        print("ROW " + json.dumps(asdict(row)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
