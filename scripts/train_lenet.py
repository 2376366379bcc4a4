"""Reproduce ``src/hookscope/zoo/data/lenet_digits.pt``: train LeNet-5 on the digits, save its state dict.

    .venv/bin/python scripts/train_lenet.py            # overwrites the shipped file (~12 s on one CPU thread)
    .venv/bin/python scripts/train_lenet.py --out /tmp/lenet.pt

``hookscope.zoo.lenet.train`` is seeded, runs on one thread with ``torch.use_deterministic_algorithms(True)``
and restores those settings afterwards: on one machine two runs write the same bytes (given the same file
name, which torch.save puts inside the archive). Prints the test accuracy of the new weights and, when
there is one, of the file they replace.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from hookscope.zoo import lenet

SHIPPED = Path(__file__).resolve().parents[1] / "src" / "hookscope" / lenet.WEIGHTS


def accuracy(model: torch.nn.Module) -> float:
    inputs, labels = lenet.digits("test")
    with torch.no_grad():
        return float((model(inputs).argmax(1) == labels).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=SHIPPED, help="where to write the state dict")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.out.exists():
        old = lenet.LeNet()
        old.load_state_dict(torch.load(args.out, map_location="cpu", weights_only=True), strict=True)
        print(f"{args.out}: test accuracy {accuracy(old.eval()):.4f} (before)")
    model = lenet.train(args.epochs, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), args.out)
    print(f"{args.out}: test accuracy {accuracy(model):.4f} ({args.epochs} epochs, seed {args.seed})")


if __name__ == "__main__":
    main()
