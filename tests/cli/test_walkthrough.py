"""``hookscope demo --model lenet`` tells in the terminal what each hook kind captured, with the
numbers of hooks written by hand; ``hookscope report --kinds`` draws the kinds asked for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from hookscope.cli import main
from hookscope.report.html import format_number
from hookscope.zoo import lenet


def by_hand() -> dict[tuple[str, str], torch.Tensor]:
    """conv1's and conv2's input, output and both gradients of the top-1 score, from torch's own hooks."""
    model = lenet.lenet()
    x = lenet.digits("test")[0][:8].clone().requires_grad_(True)
    seen: dict[tuple[str, str], torch.Tensor] = {}
    handles = []
    for name in ("conv1", "conv2"):

        def keep(module: torch.nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor, name: str = name) -> None:
            seen[name, "input"], seen[name, "output"] = args[0], out

        handles.append(getattr(model, name).register_forward_hook(keep))
    try:
        logits = model(x)
    finally:
        for handle in handles:
            handle.remove()
    score = logits.gather(1, logits.argmax(1, keepdim=True)).sum()
    names = [("conv1", "input"), ("conv1", "output"), ("conv2", "input"), ("conv2", "output")]
    grads = torch.autograd.grad(score, [seen[n] for n in names])
    for (site, kind), grad in zip(names, grads, strict=True):
        seen[site, "grad_" + kind] = grad
    return seen


def test_the_lenet_demo_prints_what_each_hook_captured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--model", "lenet", "--out", str(tmp_path / "demo")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == str(tmp_path / "demo" / "index.html")
    assert lines[0].startswith("What each hook kind captured, on (8, 1, 32, 32) float32")
    rows = {tuple(line.split()[:2]): line for line in lines[1:-1]}
    assert len(rows) == 8
    hooks = {"input": "forward pre-hook", "output": "forward hook", "grad_input": "tensor hook (input)"}
    for (site, kind), tensor in by_hand().items():
        row = rows[site, kind]
        values = tensor.detach().double()
        numbers = [values.mean(), values.std(unbiased=False), values.min(), values.max()]
        expected = "  ".join(
            f"{n} {format_number(float(v))}" for n, v in zip(("mean", "std", "min", "max"), numbers, strict=True)
        )
        assert row.endswith(expected), (row, expected)
        assert "(" + ", ".join(map(str, tensor.shape)) + ") float32" in row
        assert hooks.get(kind, "tensor hook (output)") in row
    page = (tmp_path / "demo" / "index.html").read_text()
    card = re.search(r'<article class="card layer" id="layer-0".*?</article>', page, re.S)
    assert card is not None and "conv1" in card.group(0)
    assert [k for k in ("input", "gradient · grad_input", "gradient · grad_output") if k in card.group(0)] == [
        "input",
        "gradient · grad_input",
        "gradient · grad_output",
    ]


def test_report_kinds_draws_the_kinds_asked_for_and_implies_grads(tmp_path: Path) -> None:
    out = tmp_path / "report"
    args = ["report", "lenet", "random:2x1x32x32", "--select", "conv2", "--kinds", "input", "grad_input"]
    assert main([*args, "--out", str(out)]) == 0
    card = re.search(r'<article class="card layer".*?</article>', (out / "index.html").read_text(), re.S)
    assert card is not None
    headings = re.findall(r'<div class="kind">(.*?)</div>', card.group(0))
    assert headings == ["input", "gradient · grad_input"]
    assert "args[0]</code> (2, 6, 14, 14)" in card.group(0)
