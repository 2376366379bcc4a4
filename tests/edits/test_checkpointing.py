"""Edits under activation checkpointing: an edit follows its call into the recomputation.

The oracle is the same edit on the network run without a checkpoint (``tests.checkpointed``):
the output, the input's and parameters' gradients and the report equal it, ``call=k`` means the
k-th logical call, and torch's ``CheckpointError`` is never raised. A block that ends before the
backward pass a checkpoint still owes it raises ``EditError`` naming checkpointing.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import hookscope
from hookscope import edits
from tests.checkpointed import HOWS, Net, batch

EDITS = {
    "output, every call": lambda: edits.scale(0.5),
    "output, call 1": lambda: edits.zero(channels=[1, 4], call=1),
    "input, call 0": lambda: edits.add(torch.full((8,), 0.25, dtype=torch.float64), kind="input", call=0),
    "gradient": lambda: edits.scale(3.0, kind="grad_output"),
}


def edited(net: Net, op: Any) -> tuple[list[torch.Tensor], list[tuple[Any, ...]]]:
    mix = next(name for name, _ in net.named_modules() if name.endswith("mix"))
    x = batch().requires_grad_()
    with hookscope.edit(net, {mix: op}) as ed:
        y = net(x)
        y.pow(2).sum().backward()
    rows = [(r.edit, r.kind, r.calls, r.changed, r.elements, round(r.relative, 12), r.note) for r in ed.report().rows]
    return [y.detach(), x.grad, *(p.grad for p in net.parameters())], rows


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("which", EDITS)
def test_an_edit_follows_its_call_into_the_recomputation(how: str, which: str) -> None:
    (values, rows), (expected, oracle) = edited(Net(how), EDITS[which]()), edited(Net(None), EDITS[which]())
    for got, want in zip(values, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert rows == oracle  # each logical call tallied once


def test_the_edit_changed_the_result() -> None:  # the oracle is not the unedited network
    x = batch()
    with hookscope.edit(net := Net("reentrant"), {"body.mix": edits.scale(0.5)}):
        edited_out = net(x).detach()  # no graph kept: no backward pass is owed
    torch.testing.assert_close(Net(None)(x), net(x))
    assert not torch.allclose(edited_out, net(x))


@pytest.mark.parametrize("how", ["non-reentrant", "reentrant"])
def test_a_block_ended_before_the_checkpointed_backward_names_checkpointing(how: str) -> None:
    net, kept = Net(how), []
    wanted = pytest.raises(hookscope.errors.EditError, match=r"torch.utils.checkpoint region\(s\) it edited")
    with wanted, hookscope.edit(net, {"body.mix": edits.scale(0.5)}):
        kept.append(net(batch().requires_grad_()))  # the graph (and the checkpoint's debt) outlives the block


def test_a_block_whose_graph_is_gone_ends_quietly() -> None:
    net = Net("non-reentrant")
    with hookscope.edit(net, {"body.mix": edits.scale(0.5)}) as ed:
        net(batch().requires_grad_()).sum().item()  # no graph kept: nothing will be recomputed
    assert ed.report().rows[0].calls == (0, 1)
