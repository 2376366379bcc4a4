"""``hookscope report ... --ablate SITE:EDIT``: the prediction before and after an ablation, side by side.

The syntax (the flag may be given several times; each edit applies at once)::

    layer4:channels=3,17     zero channels 3 and 17 (dim 1) of layer4's output
    fc:units=0,1             zero units 0 and 1 (the last dim)
    encoder.layer.3:positions=0   zero token 0 (dim 1)
    layer4:zero              zero the whole output
    layer4:mean              replace it by its mean over the batch
    layer2.0.conv1:scale=0.5 multiply it by 0.5

SITE is any selector ``--select`` takes (a name, a glob, ``re:REGEX``, ``:blocks``); the edit is
what follows its last ``:``. A spec that does not parse is a one-line usage error.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from ..edits.ablation import ablation
from ..edits.edit_op import EditOp
from ..edits.ops import mean, scale, zero
from ..report.content import Section

SYNTAX = "SITE:channels=I,J | SITE:units=I,J | SITE:positions=I,J | SITE:zero | SITE:mean | SITE:scale=F"
HELP = f"edit a layer and show the prediction before and after it, side by side ({SYNTAX}); may be repeated"


def ablation_spec(text: str) -> tuple[str, EditOp]:
    """``'layer4:channels=3,17'`` -> ``('layer4', edits.zero(channels=[3, 17]))``; argparse's type."""
    site, colon, edit = text.rpartition(":")
    if not colon or not site or not edit:
        raise argparse.ArgumentTypeError(f"--ablate takes SITE:EDIT ({SYNTAX}), got {text!r}")
    name, equals, value = edit.partition("=")
    if name in ("zero", "mean") and not equals:
        return site, zero() if name == "zero" else mean()
    if name == "scale" and equals:
        try:
            return site, scale(float(value))
        except ValueError:
            raise argparse.ArgumentTypeError(f"--ablate {text!r}: scale= takes a number, got {value!r}") from None
    if name in ("channels", "units", "positions") and equals:
        try:
            indices = [int(i) for i in value.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--ablate {text!r}: {name}= takes integers separated by commas, e.g. {name}=3,17"
            ) from None
        if name == "channels":
            return site, zero(channels=indices)
        return site, zero(units=indices) if name == "units" else zero(positions=indices)
    raise argparse.ArgumentTypeError(f"--ablate {text!r}: unknown edit {edit!r}; write one of {SYNTAX}")


def ablation_sections(
    specs: Sequence[tuple[str, EditOp]] | None, model: nn.Module, x: Tensor, *, labels: Any, top_k: int, output: Any
) -> list[Section]:
    """The report's ablation section for the ``--ablate`` specs given (none: no section)."""
    if not specs:
        return []
    plan: dict[str, list[EditOp]] = {}
    for site, op in specs:
        plan.setdefault(site, []).append(op)
    said = ", ".join(f"{site} {op!r}" for site, op in specs)
    title = f"--ablate {said}: the prediction without and with it, under no_grad."
    return [ablation(model, x, plan, labels=labels, top_k=top_k, output=output, title=title)]  # type: ignore[arg-type]
