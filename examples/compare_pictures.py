"""Draws cka.png: the CKA of the trained LeNet's layers against a random-init LeNet's, on the test digits.

    python examples/compare_pictures.py                 # writes examples/output/compare/cka.png
    python examples/compare_pictures.py --out FOLDER    # writes FOLDER/cka.png
    python examples/compare_pictures.py --docs          # regenerates the guide's docs/images/cka.png

Every leaf of hookscope's LeNet (trained on scikit-learn's digits, shipped in the package) down,
the same leaves of the same architecture at its random initialisation (seed 0) across, over the
360 test digits in batches of 60: the first layers stay close to where they started, the last ones
do not (the diagonal, on the right).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import hookscope
from hookscope.zoo.lenet import digits, lenet

DOCS = Path(__file__).resolve().parent.parent / "docs" / "images"
OUTPUT = Path(__file__).resolve().parent / "output"  # every example writes under examples/output/ (ignored)


def where() -> Path:
    """The file to draw: ``cka.png`` in ``--out FOLDER`` (default ``examples/output/compare/``),
    or in docs/images with ``--docs``."""
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--out", default=str(OUTPUT / "compare"), help="the folder to write cka.png into")
    options.add_argument("--docs", action="store_true", help="write the guide's docs/images/cka.png instead")
    args = options.parse_args()
    return (DOCS if args.docs else Path(args.out)) / "cka.png"


def main() -> None:
    out = where()
    out.parent.mkdir(parents=True, exist_ok=True)
    trained = lenet()
    torch.manual_seed(0)
    untrained = type(trained)().eval()
    x, _ = digits("test")
    sim = hookscope.compare.cka(trained, untrained, x.split(60))
    sim.plot().save(out)
    print(sim.table())


if __name__ == "__main__":
    main()
