"""A warning of a public function points at the caller's line, not into hookscope: Python prints that
file and line, and ``-W error`` tracebacks and IDEs jump there."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookscope
from hookscope.errors import CaptureWarning


class _TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.box, self.classes = nn.Linear(4, 2), nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.conv(x).mean(dim=(2, 3))
        return {"box": self.box(h), "logits": self.classes(h)}


def test_cam_and_faithfulness_warn_at_the_caller_s_line_once() -> None:
    model, x = _TwoHeads().eval(), torch.randn(1, 3, 8, 8)
    heat = hookscope.cam(model, x, output="logits")
    with pytest.warns(CaptureWarning, match=r"using the first, out\['box'\]") as record:
        hookscope.faithfulness(model, x, {"gradcam": heat}, metrics=("deletion",), steps=4)
    assert [(w.filename, w.lineno) for w in record] == [(__file__, record[0].lineno)]  # one warning, here
    with pytest.warns(CaptureWarning, match=r"using the first, out\['box'\]") as record:
        hookscope.cam(model, x)
    assert {w.filename for w in record} == {__file__}


def test_a_capture_s_exit_warning_points_at_the_with_block() -> None:
    model, x = _TwoHeads().eval(), torch.randn(1, 3, 8, 8)
    block = hookscope.capture(model, "conv", kinds=("grad_output",))
    with pytest.warns(CaptureWarning, match="grad_output") as record, block:
        model(x)  # no backward: the gradient kind stays empty, said when the block ends
    assert record[0].filename == __file__
