"""Never silent: every way an edit can fail to take effect raises EditError naming the site and the
reason (or warns EditWarning with strict=False); a zero-ablation of a zero tensor is fine and says so."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope import edits


class Branchy(nn.Module):
    """``spare`` never runs; ``pair`` returns a tuple; ``zeros`` always returns zeros."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.spare = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x: Tensor) -> Tensor:
        h = self.lin(x)
        return h * 0 + h


class Pair(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return x, x + 1


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Branchy(), Pair())


def run(m: nn.Module, plan: dict[Any, Any], *, backward: bool = False, strict: bool = True, grad: bool = True) -> Any:
    x = torch.randn(2, 3, requires_grad=True)
    with hookscope.edit(m, plan, strict=strict) as ed, torch.set_grad_enabled(grad):
        a, b = m(x)
        if backward:
            (a.sum() + b.sum()).backward()
    return ed


FAILURES = [
    ("never ran", {"0.spare": edits.zero()}, {}, r"edit at '0.spare': '0.spare' never ran inside the block"),
    ("glob that never ran", {"0.sp*": edits.scale(2.0)}, {}, r"'0.spare' never ran"),
    (
        "key never appeared",
        {"1": edits.zero(key="out[2]")},
        {},
        r"at '1' \(output\): key 'out\[2\]' never appeared; its output holds out\[0\], out\[1\]",
    ),
    (
        "several tensors, no key",
        {"1": edits.zero()},
        {},
        r"at '1' \(output\): its output holds 2 tensors \(out\[0\], out\[1\]\); pass key=, e.g. key='out\[0\]'",
    ),
    (
        "input key never appeared",
        {"1": edits.zero(kind="input", key="kwargs.mask")},
        {},
        r"key 'kwargs.mask' never appeared; its input holds args\[0\]",
    ),
    (
        "changed nothing",
        {"0.lin": edits.scale(1.0)},
        {},
        r"edits.scale\(1.0\) at '0.lin' \(output\): it changed nothing in 1 call",
    ),
    ("call never happened", {"0.lin": edits.zero(call=1)}, {}, r"call 1 never happened: '0.lin' ran 1 time"),
    (
        "no backward",
        {"0.lin": edits.zero(kind="grad_output")},
        {},
        r"no backward pass reached its output; call .backward\(\) inside the block",
    ),
    (
        "no grad mode",
        {"0.lin": edits.zero(kind="grad_output")},
        {"grad": False},
        r"no gradient can reach it: under torch.no_grad\(\)",
    ),
]


@pytest.mark.parametrize(("name", "plan", "options", "message"), FAILURES, ids=[f[0] for f in FAILURES])
def test_an_edit_that_did_not_take_effect_raises_naming_site_and_reason(
    name: str, plan: dict[Any, Any], options: dict[str, Any], message: str
) -> None:
    m = model()
    weights = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(hookscope.EditError, match=message):
        run(m, plan, **options)
    assert hookscope.find_hooks(m) == []
    assert all(torch.equal(v, weights[k]) for k, v in m.state_dict().items())


@pytest.mark.parametrize(("name", "plan", "options", "message"), FAILURES, ids=[f[0] for f in FAILURES])
def test_strict_false_warns_the_same_words(
    name: str, plan: dict[Any, Any], options: dict[str, Any], message: str
) -> None:
    with pytest.warns(hookscope.EditWarning, match=message):
        run(model(), plan, strict=False, **options)


def test_several_failures_are_counted_in_one_line() -> None:
    with pytest.raises(
        hookscope.EditError,
        match=r"never ran inside the block; call the model inside it \(and 1 more; see .report\(\)\); pass strict=",
    ):
        run(model(), {"0.spare": edits.zero(), "0.lin": edits.scale(1.0)})


def test_a_zero_ablation_of_a_zero_tensor_is_fine_and_says_so() -> None:
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    with torch.no_grad():
        m[0].weight.zero_()
        m[0].bias.fill_(-1.0)  # the ReLU's output is all zero
    with hookscope.edit(m, {"1": edits.zero()}) as ed:
        m(torch.randn(2, 3))
    (row,) = ed.report()
    assert (row.changed, row.relative, row.note) == (0, 0.0, "already zero: nothing to change")
    assert "already zero" in str(ed.report())


def test_a_selector_that_matches_nothing_fails_before_any_hook() -> None:
    m = model()
    with pytest.raises(hookscope.SelectionError, match="'layer9' matched no module"):
        hookscope.edit(m, {"layer9": edits.zero()})
    with pytest.raises(hookscope.EditError, match=r"a dict \{selector: edit\}"):
        hookscope.edit(m, {})  # type: ignore[arg-type]
    with pytest.raises(hookscope.EditError, match=r"an edit is an edits.\* helper or a function"):
        hookscope.edit(m, {"0": 3})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (edits.zero(channels=[7]), r"channels \[7\] out of range at '0.lin' output out \(call 0\): dim 1 has 3"),
        (edits.add(torch.ones(5)), r"a vector of 5 fits neither the last dim nor dim 1"),
        (edits.replace(torch.ones(4, 3)), r"the replacement of shape \(4, 3\) does not fit \(2, 3\)"),
        (edits.function(lambda t, call: t.mul_(2)), r"changed the tensor in place; return a new tensor"),
        (edits.function(lambda t, call: t[:1]), r"returned \(1, 3\), expected a tensor of shape \(2, 3\)"),
    ],
    ids=["out of range", "vector fits no dim", "shape", "in place", "wrong shape"],
)
def test_an_edit_that_cannot_apply_raises_in_the_forward_pass(op: Any, message: str) -> None:
    m = model()
    with pytest.raises(hookscope.EditError, match=message):
        run(m, {"0.lin": op})
    assert hookscope.find_hooks(m) == []


def test_options_are_checked_when_the_edit_is_made() -> None:
    with pytest.raises(hookscope.EditError, match="pass one of channels=, units=, positions="):
        edits.zero(channels=[1], units=[2])
    with pytest.raises(hookscope.EditError, match="kind is one of input, output, grad_output"):
        edits.zero(kind="grad_input")  # type: ignore[arg-type]
    with pytest.raises(hookscope.EditError, match="call= is the index of one call"):
        edits.scale(2.0, call=-1)
    with pytest.raises(hookscope.EditError, match="needs min=, max= or both"):
        edits.clamp()
