"""Watch LeNet train on scikit-learn's handwritten digits, then write the training report.

    python examples/train_lenet_watch.py [OUT]        # OUT defaults to examples/output/runs/

300 steps of Adam at batch 32 (a few seconds on one CPU thread), logged every 10 steps, into
OUT/lenet.hookscope; then OUT/lenet-report/index.html, the page `hookscope report --from
OUT/lenet.hookscope` writes. `hookscope info OUT/lenet.hookscope` describes the store.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import hookscope
from hookscope.zoo.lenet import LeNet, digits

STEPS, BATCH, EVERY = 300, 32, 10


def main(out: Path) -> Path:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y = digits("train")
    test_x, test_y = digits("test")
    model = LeNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    order = torch.randperm(len(y))
    with hookscope.watch(model, opt, every=EVERY, out=out / "lenet.hookscope", force=True) as w:
        for step in range(STEPS):
            rows = order[torch.arange(step * BATCH, (step + 1) * BATCH) % len(y)]
            loss = F.cross_entropy(model(x[rows]), y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()  # watch counts the step from the optimizer's step hook
            if step % 100 == 99:
                with torch.no_grad():  # an evaluation pass: ignored by watch
                    accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
                print(f"step {step + 1}: loss {loss.item():.3f}, test accuracy {accuracy:.1%}")
    print(w.history("fc1"))
    for alert in w.alerts:
        print(alert)
    page = hookscope.build_training_report(hookscope.load(out / "lenet.hookscope"))
    return hookscope.write_report(page, out / "lenet-report", force=True)


if __name__ == "__main__":
    print(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "output" / "runs"))
