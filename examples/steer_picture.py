"""Draws steer_sweep.png: the steering sweep of docs/guide/steer.md on a tiny random GPT-2.

    python examples/steer_picture.py                 # writes examples/output/steer/steer_sweep.png
    python examples/steer_picture.py --out FOLDER    # writes FOLDER/steer_sweep.png
    python examples/steer_picture.py --docs          # regenerates the guide's docs/images/steer_sweep.png

The same model, direction, prompts and scales as docs/guide/steer.md's example: the direction ``W[7] - W[9]``
(two rows of the unembedding) added to block 1's output over 16 random prompts, the propensity
``log p(7) - log p(9)`` read after each, and the KL divergence on 8 neutral prompts.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import transformers

import hookscope

DOCS = Path(__file__).resolve().parent.parent / "docs" / "images"
OUTPUT = Path(__file__).resolve().parent / "output"  # every example writes under examples/output/ (ignored)


def where() -> Path:
    """The file to draw: ``steer_sweep.png`` in ``--out FOLDER`` (default ``examples/output/steer/``),
    or in docs/images with ``--docs``."""
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--out", default=str(OUTPUT / "steer"), help="the folder to write steer_sweep.png into")
    options.add_argument("--docs", action="store_true", help="write the guide's docs/images/steer_sweep.png instead")
    args = options.parse_args()
    return (DOCS if args.docs else Path(args.out)) / "steer_sweep.png"


def main() -> None:
    out = where()
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    w = model.lm_head.weight.detach()
    prompts = torch.randint(1, 50, (16, 6), generator=torch.Generator().manual_seed(0))
    neutral = torch.randint(1, 50, (8, 6), generator=torch.Generator().manual_seed(1))
    sweep = hookscope.steer_sweep(model, prompts, w[7] - w[9], select="transformer.h.1", completions=(7, 9),
                                  neutral=neutral, scales=(-2, -1, 0, 1, 2))  # fmt: skip
    sweep.plot().save(out)
    print(sweep.table())


if __name__ == "__main__":
    main()
