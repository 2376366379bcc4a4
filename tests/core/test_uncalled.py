"""A selected module that was never called: the warning names the true cause, read from the code of the
module that holds it (``core.uncalled``), not one guess for all."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.errors import CaptureWarning


@pytest.fixture(autouse=True)
def _no_compiled_code_in_this_process() -> None:
    """Earlier tests compiled code in this process; with compiled frames and nothing called, a capture blames
    torch.compile (core.diagnosis), which is not the cause these tests pin."""
    counters = pytest.importorskip("torch._dynamo.utils").counters
    counters["frames"].clear()


BLAMED = "module.forward(x)"  # the one cause every uncalled module used to get


class Owner(nn.Module):
    """Four modules it never calls as module(x): through .forward, in training only, on a flag, never."""

    def __init__(self) -> None:
        super().__init__()
        self.inner, self.aux, self.gate, self.spare = nn.Linear(2, 2), nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)

    def forward(self, x: Tensor, gated: bool = False) -> Tensor:
        y = self.inner.forward(x)  # runs, but no hook sees it
        if self.training:
            y = y + self.aux(y)
        if gated:
            y = self.gate(y)
        return y


def _warnings(model: nn.Module, select: object, *args: object) -> list[str]:
    with pytest.warns(CaptureWarning) as caught, hookscope.capture(model, select) as cap, torch.no_grad():
        model(*args)
    assert all(record.calls == [] for record in cap.values())
    return [str(w.message) for w in caught]


def test_each_uncalled_module_gets_its_own_cause() -> None:
    owner = Owner().eval()
    said = _warnings(owner, ["inner", "aux", "gate", "spare"], torch.randn(1, 2))
    assert said == [
        "hookscope: nothing captured for 'inner': it was never called inside the block: Owner calls it as "
        "self.inner.forward(...), which skips every hook; call self.inner(...)",
        "hookscope: nothing captured for 'aux': it was never called inside the block: Owner calls it only in "
        "training mode and the model is in eval mode; call model.train()",
        "hookscope: nothing captured for 'gate': it was never called inside the block: Owner calls it only on a "
        "branch this run did not take (a condition or a flag)",
        "hookscope: nothing captured for 'spare': it was never called inside the block: Owner's code never names "
        "it: it is not used, or something else calls it on a path not taken",
    ]
    with hookscope.capture(owner.train(), ["aux"]) as cap, torch.no_grad():
        owner(torch.randn(1, 2))  # the fix the warning gives
    assert len(cap["aux"].calls) == 1


def test_gpt2_under_sdpa_names_the_dropout_it_applies_as_a_function() -> None:
    """GPT-2's attention reads attn_dropout.p and hands it to its attention function (SDPA here): the
    module is never called, in eval as in training, and the warning says so instead of blaming .forward."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).eval()
    assert model.config._attn_implementation == "sdpa"
    ids = torch.randint(0, 50, (1, 6))
    [said] = _warnings(model, "transformer.h.*.attn.attn_dropout", ids)
    assert said == (
        "hookscope: nothing captured for 'transformer.h.0.attn.attn_dropout', 'transformer.h.1.attn.attn_dropout': "
        "it was never called inside the block: GPT2Attention (attn_implementation='sdpa') reads "
        "self.attn_dropout.p and does that work as a function instead of calling it, so there is no module call "
        "to hook; it calls self.attn_dropout(...) only on another path (a config option or branch); capture "
        "GPT2Attention's output instead"
    )
    assert BLAMED not in said
    with pytest.warns(CaptureWarning, match="attn_dropout.p"), hookscope.capture(model.train(), "*attn_dropout") as cap:
        model(ids)  # training mode does not call it either: the cause is the code, not the mode
    assert all(record.calls == [] for record in cap.values())


def test_a_module_in_a_sequential_or_a_module_that_did_not_run_points_above_it() -> None:
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    with pytest.warns(CaptureWarning) as caught, hookscope.capture(seq, ["0", "1"]):
        seq[0](torch.randn(1, 2))
    assert "'1': it was never called inside the block: the nn.Sequential that holds it calls every module" in str(
        caught[0].message
    )
    net = nn.ModuleDict({"owner": Owner(), "other": nn.Linear(2, 2)})
    with pytest.warns(CaptureWarning) as caught, hookscope.capture(net, ["owner", "owner.spare"]):
        net["other"](torch.randn(1, 2))
    said = [str(w.message) for w in caught]
    assert (
        "hookscope: nothing captured for 'owner.spare': it was never called inside the block: it sits in 'owner', "
        "which "
        "was never called either" in said
    )


def test_where_the_code_cannot_be_read_the_likely_causes_are_listed_most_likely_first() -> None:
    net = nn.ModuleDict({"used": nn.Linear(2, 2), "unused": nn.Linear(2, 2)})  # no code calls either
    with pytest.warns(CaptureWarning) as caught, hookscope.capture(net, ["used", "unused"]):
        net["used"](torch.randn(1, 2))
    [said] = [str(w.message) for w in caught]
    assert said.startswith("hookscope: nothing captured for 'unused': it was never called inside the block; likely")
    assert said.index("skipped it on this run") < said.index("not used") < said.index(BLAMED)
