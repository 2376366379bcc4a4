"""watch over a ``torch.compile``d train-step function: hookscope's hooks stay out of Dynamo's trace
(no graph break inside them, no recompilation per step) and the rows equal the eager run's."""

from __future__ import annotations

import io
import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope

STEPS, EVERY = 6, 2
DATA = [(torch.randn(8, 4, generator=torch.Generator().manual_seed(k)), torch.tensor([0, 1] * 4)) for k in range(STEPS)]


def _train(compiled: bool) -> hookscope.Watch:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    run = torch.compile(step) if compiled else step
    with hookscope.watch(model, opt, every=EVERY) as w:
        for x, y in DATA:
            w.log(loss=run(x, y))
    return w


# Dynamo itself reads a non-leaf .grad while it compiles any such step, hooks or not (torch 2.14.1)
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf Tensor:UserWarning")
def test_a_compiled_train_step_is_watched_as_the_eager_one() -> None:
    import torch._dynamo
    from torch._dynamo.utils import counters

    eager = _train(compiled=False)
    torch._dynamo.reset()
    counters.clear()
    said = io.StringIO()
    handler = logging.StreamHandler(said)
    logging.getLogger("torch._dynamo").addHandler(handler)
    try:
        compiled = _train(compiled=True)  # filterwarnings=error: Dynamo's warning of a graph break in a hook fails
        frames, breaks = counters["frames"]["total"], sum(counters["graph_break"].values())
    finally:
        logging.getLogger("torch._dynamo").removeHandler(handler)
        torch._dynamo.reset()
        counters.clear()  # no compiled frames left for a later test's diagnosis (core.diagnosis)
    assert "recompile_limit" not in said.getvalue()
    # frames Dynamo compiled: the step's graphs split at hookscope's hooks, each compiled once
    # (15 frames and 4 breaks measured in torch 2.14.1; 169 frames, 33 breaks and the recompile limit hit
    # when the hooks were traced)
    assert frames <= 20
    assert breaks <= 4
    for name, history in eager.histories().items():
        torch.testing.assert_close(compiled.history(name).rows, history.rows, rtol=1e-5, atol=1e-7, equal_nan=True)
    assert compiled.history("0").steps == [0, 2, 4]
