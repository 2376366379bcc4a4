"""``hookscope report`` of a model with several inputs: the first reported, the others held as the file gives
them. Oracle: the model called on all its inputs, and ``torch.autograd.grad`` of the same target."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import hookscope
from hookscope.cli import main
from hookscope.cli.inputs import LoadedInput
from hookscope.cli.several import first_input
from tests import handwritten

SRC, TGT = torch.tensor([[1, 5, 2, 9, 4, 3]]), torch.tensor([[1, 3, 3, 6]])


@pytest.mark.parametrize("named", [False, True])
def test_the_first_input_runs_the_model_on_all_of_them_and_forward_comes_back(named: bool) -> None:
    model = handwritten.seq2seq()
    batch = LoadedInput(SRC, None, ["s2s.pt"], kwargs={"src": SRC, "tgt": TGT}) if named else LoadedInput(
        SRC, None, ["s2s.pt"], args=(SRC, TGT))  # fmt: skip
    with first_input(model, batch, "cpu") as (x, note):
        assert torch.equal(x, SRC)
        with hookscope.capture(model, "transformer.encoder", kinds=("output", "grad_output")) as cap:
            model(x)[:, -1, 3].sum().backward()
    assert note == ("input: the first of the model's inputs is reported, "
                    + ("tgt of s2s.pt" if named else "input 2 of s2s.pt") + " held as given")  # fmt: skip
    assert not model._forward_pre_hooks  # the hook that added the rest is gone
    model.zero_grad()
    seen = {}
    hook = model.transformer.encoder.register_forward_hook(lambda m, i, o: seen.setdefault("out", o))
    score = model(SRC, TGT)[:, -1, 3].sum()
    hook.remove()
    (expected,) = torch.autograd.grad(score, [seen["out"]])
    torch.testing.assert_close(cap["transformer.encoder"].grad_output, expected)


def test_forward_comes_back_after_an_error() -> None:
    model = handwritten.seq2seq()
    with pytest.raises(RuntimeError), first_input(model, LoadedInput(SRC, None, ["a.pt"], args=(SRC, TGT)), "cpu"):
        raise RuntimeError("inside")
    assert not model._forward_pre_hooks


def test_report_grads_of_a_seq2seq(tmp_path: Path, capsys) -> None:
    torch.save({"src": SRC, "tgt": TGT}, tmp_path / "s2s.pt")
    out = tmp_path / "r"
    code = main(["report", f"{Path(handwritten.__file__)}:seq2seq", str(tmp_path / "s2s.pt"), "--grads",
                 "--target=[:, -1, 3]", "--max-layers", "4", "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    page = (out / "index.html").read_text()
    assert "tgt of s2s.pt held as given" in page and "grad_output" in page
