"""``hookscope explain``: the evidence bundle of one prediction (``hookscope.explain_prediction``), and what
``hookscope info`` says of a bundle (a wrong prediction's or a training alert's)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..base.files import new_output
from ..errors import OptionError
from ..evidence.bundle import is_bundle
from ..evidence.prediction import explain_prediction
from ..evidence.result import Evidence
from .inputs import load_input
from .meter import progress
from .models import load_model
from .outputs import check_writable, given, read_by


def run_explain(args: argparse.Namespace) -> int:
    """``hookscope explain MODEL IMAGE --expected N --out DIR``: write the bundle, print its folder and findings."""
    check_writable(new_output(args.out, force=args.force, kind="evidence", inputs=given(read_by(args))))
    loaded = load_model(args.model, weights=args.weights, trust=args.trust_weights)
    if loaded.tokenizer is not None:
        raise OptionError(f"explain writes the evidence of an image classifier's prediction; {loaded.name} is a "
                          "text model")  # fmt: skip
    preprocess = loaded.preprocess.with_overrides(size=args.size, mean=args.mean, std=args.std)
    batch = load_input([args.image], preprocess)
    if batch.several or batch.x.shape[0] != 1:
        raise OptionError(f"explain explains one image; {args.image} holds {batch.x.shape[0]} (or several inputs)")
    loaded.model.to(args.device)
    found = explain_prediction(
        loaded.model, batch.x.to(args.device), args.out, expected=args.expected, select=args.layer,
        method=args.method, top_k=args.top_k, labels=loaded.labels, seed=args.seed, force=args.force,
        progress=progress,
    )  # fmt: skip
    print(found.table())
    return 0


def describe_bundle(path: str | Path) -> str | None:
    """What ``hookscope info`` prints of an evidence bundle; None when ``path`` is not one (a store, say)."""
    return Evidence.read(path).table() if is_bundle(path) else None
