"""Edits are hooks too: none survives the block, whatever way it ends (tests/test_leaks.py's model,
counts and exits), and the weights come out bit-identical."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope import edits
from tests.test_leaks import ERRORS, EXITS, body, hook_counts, make_model

PLANS: dict[str, dict[str, Any]] = {
    "output": {"encoder.0": edits.scale(2.0), "head.1": edits.add(1.0)},
    "input": {"encoder.0": edits.zero(units=[0], kind="input"), "head.0": edits.scale(0.5, kind="input")},
    "grad_output": {"encoder.0": edits.scale(3.0, kind="grad_output"), "head.0": edits.scale(0.5, kind="grad_output")},
    "all": {"encoder.0": [edits.scale(2.0), edits.scale(2.0, kind="input"), edits.scale(3.0, kind="grad_output")]},
}


@pytest.mark.parametrize("exit_", EXITS)
@pytest.mark.parametrize("plan", list(PLANS))
def test_no_edit_hook_survives_the_block(exit_: str, plan: str) -> None:
    model: nn.Sequential = make_model()
    x = torch.randn(2, 4, requires_grad=True)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    before, during = hook_counts(model), {}
    kept = []
    error = ERRORS[exit_][0] if exit_ in ERRORS else None
    with contextlib.suppress(*([error] if error else [])), hookscope.edit(model, PLANS[plan]):
        during = hook_counts(model)
        kept.append(model.encoder[0](x))  # a tensor from inside the block, for tensor hooks
        body(model, x, exit_)
    assert exit_ == "normal" or len(kept) == 1
    assert during != before, "the counts do not see the edit's hooks"
    assert hook_counts(model) == before and hookscope.find_hooks(model) == []
    assert not kept[0]._backward_hooks, "a tensor hook on an edited output outlived the block"
    model.trip.mode = "ok"
    kept[0].sum().backward()  # no hook fires (the edit's grad hooks are gone)
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
