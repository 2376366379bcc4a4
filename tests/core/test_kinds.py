"""The one table of kinds: a row added here reaches the capture, the CLI and a store, and nothing else lists kinds."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import get_args

import pytest
import torch
from torch import nn

import hookscope
from hookscope.cli.parser import command_parser
from hookscope.core import kinds
from hookscope.core.kinds import TABLE, KindInfo
from hookscope.store.reader import load
from hookscope.store.save import save

SRC = Path(hookscope.__file__).parent


@pytest.fixture
def extra_kind(monkeypatch: pytest.MonkeyPatch) -> str:
    """A grad_output-like kind, added to the table for one test: d loss / d output, under another name."""
    monkeypatch.setitem(TABLE, "grad_output_copy", KindInfo("grad_output_copy", "output_grad", "as output", True, "x"))
    return "grad_output_copy"


def test_the_literal_type_names_exactly_the_table() -> None:
    assert get_args(kinds.Kind) == tuple(TABLE) == hookscope.KINDS == kinds.names()
    assert kinds.forward_kinds() == ("input", "output")
    assert kinds.gradient_kinds() == ("grad_input", "grad_output", "param_grad")
    assert [k for k in TABLE if not TABLE[k].per_call] == ["param_grad"]


def test_a_kind_added_to_the_table_is_captured_at_its_point(extra_kind: str) -> None:
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    x = torch.randn(5, 3, dtype=torch.float64)
    hidden = net[1](net[0](x))
    (expected,) = torch.autograd.grad(net[2](hidden).sum(), hidden)  # the oracle: d sum / d tanh's output
    with hookscope.capture(net, "1", kinds=("output", extra_kind)) as cap:
        net(x).sum().backward()
    assert cap.kinds == ("output", extra_kind)  # table order
    torch.testing.assert_close(cap["1"].calls[0].get(extra_kind), expected)
    assert kinds.gradient_kinds()[-1] == extra_kind
    with pytest.raises(hookscope.OptionError, match=f"extract captures forward kinds.*'{extra_kind}'"):
        hookscope.extract(net, [x], out="unused", kinds=(extra_kind,), progress=False)


def test_a_kind_added_to_the_table_reaches_the_cli_and_a_store(extra_kind: str, tmp_path: Path) -> None:
    capture_kinds = next(a for a in _subcommand("capture")._actions if a.dest == "kinds")
    extract_kinds = next(a for a in _subcommand("extract")._actions if a.dest == "kinds")
    assert extra_kind in (capture_kinds.choices or ())
    assert extra_kind not in (extract_kinds.choices or ())  # a gradient: not extractable
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU())
    with hookscope.capture(net, "0", kinds=("output", extra_kind)) as cap:
        net(torch.randn(2, 1, 6, 6)).sum().backward()
    run = load(save(cap, tmp_path / "run.hookscope").path)
    assert run["0"].kinds == ("output", extra_kind)
    assert torch.equal(run["0"].calls[0].get(extra_kind), cap["0"].calls[0].get(extra_kind))
    assert [c.kind for c in run.contents()] == ["output", extra_kind]  # sorted by the table


# A choice of two kinds, not a list of what there is: what a tap holds, what the report draws with gradients.
CHOICES = {("output", "grad_output")}


def test_no_module_but_the_table_spells_out_the_list_of_kinds() -> None:
    """A tuple, list or set literal of kind names in src/ (but the table) is a second list of kinds."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "kinds.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                names = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in TABLE]
                if len(names) >= 2 and len(names) == len(node.elts) and tuple(names) not in CHOICES:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno} {names}")
    assert found == []


def _subcommand(name: str) -> argparse.ArgumentParser:
    return command_parser(name)
