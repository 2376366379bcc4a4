"""Compiled models: capture, cam, attribute, extract, list and the CLI on ``torch.compile`` (inductor, CPU).

The matrix of docs/guide/compile.md: four ways a model is compiled (``torch.compile`` run once before
the capture, compiled but not run yet, ``fullgraph=True``, ``model.compile()`` in place), every
kind, Grad-CAM; each cell equal to the eager model's own hooks (``torch.autograd.grad`` on
what plain forward hooks saw), and after the block the compiled code runs again with no
recompilation and no hook left. Compiling is slow on CPU: each model is compiled once per
module (``Models``), on a 2x2x6x6 float64 input. Select these tests with ``-k compile``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope import CaptureWarning, SelectionError
from hookscope.cli import main

NOTE = re.escape("'Net' is compiled; inside this capture it runs eagerly (torch.compiler.set_stance('force_eager')")
HOWS = ("warm", "cold", "fullgraph", "in_place")
# dynamo reads .grad of the non-leaf input attribute() differentiates, while tracing: torch's own warning
NON_LEAF_GRAD = "ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning"


class Net(nn.Module):
    """conv -> relu -> pool -> head: a (B, 4, H, W) map for Grad-CAM, and a gradient at every module."""

    def __init__(self, channels: int = 2) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.pool(self.relu(self.conv(x))).flatten(1))


def compiled_net() -> nn.Module:
    """What a user's ``build()`` returns for the CLI: a compiled model (3-channel input)."""
    torch.manual_seed(0)
    return torch.compile(Net(channels=3))


@dataclass
class Compiled:
    how: str
    model: nn.Module  # what the user holds and calls
    net: nn.Module  # the eager model inside: hooks go here
    eager: nn.Module  # an uncompiled copy with the same weights: the oracle
    x: Tensor
    ran: bool  # the compiled code has run (so its graphs exist)


@dataclass
class Models:
    """Each way of compiling, built on first use and kept for the module: compiling is slow."""

    built: dict[str, Compiled] = field(default_factory=dict)

    def get(self, how: str) -> Compiled:
        if how not in self.built:
            self.built[how] = _compile(how)
        return self.built[how]


def _compile(how: str) -> Compiled:
    torch.manual_seed(0)
    net = Net().double()
    x = torch.randn(2, 2, 6, 6, dtype=torch.float64)
    eager = Net().double()
    eager.load_state_dict(net.state_dict())
    if how == "in_place":
        net.compile()
        model: nn.Module = net
    else:
        model = torch.compile(net, fullgraph=how == "fullgraph")
    if how != "cold":  # one training step, compiled
        model(x).square().sum().backward()
        net.zero_grad(set_to_none=True)
    return Compiled(how, model, net, eager, x, ran=how != "cold")


@pytest.fixture(scope="module")
def models() -> Models:
    return Models()


@pytest.fixture(params=HOWS)
def compiled(request: pytest.FixtureRequest, models: Models) -> Compiled:
    return models.get(request.param)


def graphs() -> int:
    """Graphs dynamo has compiled in this process."""
    from torch._dynamo.utils import counters  # imported by torch.compile already

    return int(counters["stats"]["unique_graphs"])


def eager_oracle(net: nn.Module, x: Tensor, names: list[str]) -> dict[str, dict[str, Any]]:
    """Input, output and their gradients (``torch.autograd.grad``) of each named module of the eager
    model, and its parameters' gradients, for the loss ``net(x).square().sum()``."""
    seen: dict[str, tuple[Tensor, Tensor]] = {}

    def keep(name: str, module: nn.Module, args: tuple[Tensor, ...], out: Tensor) -> None:
        seen[name] = (args[0], out)

    handles = [net.get_submodule(n).register_forward_hook(partial(keep, n)) for n in names]
    try:
        loss = net(x.clone().requires_grad_()).square().sum()
    finally:
        for handle in handles:
            handle.remove()
    params = {n: dict(net.get_submodule(n).named_parameters()) for n in names}
    wrt = [t for n in names for t in (*seen[n], *params[n].values())]
    grads = iter(torch.autograd.grad(loss, wrt))
    found = {}
    for n in names:
        grad_in, grad_out = next(grads), next(grads)
        found[n] = {"input": seen[n][0], "output": seen[n][1], "grad_input": grad_in, "grad_output": grad_out,
                    "param_grad": {p: next(grads) for p in params[n]}}  # fmt: skip
    return found


def runs_compiled(model: nn.Module, submodule: nn.Module, x: Tensor) -> bool:
    """True when ``model(x)`` runs its compiled code, with no recompilation: a hook added now (which
    compiled code never runs) does not fire, and the ``fail_on_recompile`` stance does not raise."""
    fired: list[int] = []
    handle = submodule.register_forward_hook(lambda *_: fired.append(1))
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            model(x)
    finally:
        handle.remove()
    return not fired


# -- the matrix: every way of compiling, every kind ------------------------------------------------
def test_every_kind_equals_the_eager_model(compiled: Compiled) -> None:
    names = ["conv", "head"]
    with (
        pytest.warns(CaptureWarning, match=NOTE),
        hookscope.capture(compiled.model, names, kinds=hookscope.KINDS) as cap,
    ):
        compiled.model(compiled.x.clone().requires_grad_()).square().sum().backward()
    compiled.net.zero_grad(set_to_none=True)
    assert list(cap) == names
    expected = eager_oracle(compiled.eager, compiled.x, names)
    for name in names:
        for kind in ("input", "output", "grad_input", "grad_output"):
            torch.testing.assert_close(getattr(cap[name], kind), expected[name][kind], rtol=0, atol=0)
        torch.testing.assert_close(cap[name].param_grad, expected[name]["param_grad"], rtol=0, atol=0)


def test_after_the_block_the_compiled_code_runs_again_with_no_recompilation(compiled: Compiled) -> None:
    before = graphs()
    with pytest.warns(CaptureWarning, match=NOTE), hookscope.capture(compiled.model, None) as cap:
        compiled.model(compiled.x)
    assert graphs() == before  # nothing was compiled inside the block
    assert len(cap["conv"].calls) == 1
    assert hookscope.find_hooks(compiled.model) == []
    if not compiled.ran:  # compiled before its first call: that call, now, compiles (or reuses a graph of Net)
        compiled.model(compiled.x)
        compiled.ran = True
    assert runs_compiled(compiled.model, compiled.net.conv, compiled.x)


def test_without_the_stance_hooks_added_after_compiling_never_run(models: Models) -> None:
    """The cause the design answers (torch._dynamo.config.skip_nnmodule_hook_guards)."""
    warm = models.get("warm")
    fired: list[int] = []
    handle = warm.net.conv.register_forward_hook(lambda *_: fired.append(1))
    try:
        warm.model(warm.x)
    finally:
        handle.remove()
    assert fired == []


# -- names -----------------------------------------------------------------------------------------
def test_names_are_the_eager_models_with_or_without_orig_mod() -> None:
    net = Net()
    model = torch.compile(net)  # never called: nothing is compiled
    assert hookscope.list_modules(model) == hookscope.list_modules(net)
    assert [n for n, _ in hookscope.select_modules(model)] == ["conv", "relu", "pool", "head"]
    assert hookscope.select_modules(model, "_orig_mod.conv") == [("conv", net.conv)]
    assert hookscope.select_modules(model, ["_orig_mod.*", "head"]) == hookscope.select_modules(net, "*")
    assert hookscope.select_modules(model, r"re:_orig_mod\.(conv|head)") == [("conv", net.conv), ("head", net.head)]
    assert hookscope.select_modules(model, model) == [("", net)]
    assert hookscope.select_modules(model, "_orig_mod") == [("", net)]
    no_match = r"'_orig_mod\.cnv' matched no module of Net \(5 modules\); closest: 'conv'"
    with pytest.raises(SelectionError, match=no_match):
        hookscope.select_modules(model, "_orig_mod.cnv")
    in_place = Net()
    in_place.compile()
    assert [i.name for i in hookscope.list_modules(in_place)] == ["", "conv", "relu", "pool", "head"]


def test_a_site_is_found_with_or_without_orig_mod(models: Models) -> None:
    warm = models.get("warm")
    with pytest.warns(CaptureWarning, match=NOTE), hookscope.capture(warm.model, "_orig_mod.conv") as cap:
        warm.model(warm.x)
    assert list(cap) == ["conv"]
    assert cap["_orig_mod.conv"] is cap["conv"]
    assert "_orig_mod.conv" in cap
    with pytest.raises(hookscope.NotCapturedError, match=r"'_orig_mod\.head' is not a site of this capture"):
        cap["_orig_mod.head"]


def test_find_hooks_names_hooks_of_a_compiled_model_by_their_eager_names() -> None:
    net = Net()
    model = torch.compile(net)
    handles = [net.conv.register_forward_hook(lambda *_: None), model.register_forward_pre_hook(lambda *_: None)]
    handles.append(net.head.weight.register_post_accumulate_grad_hook(lambda _: None))  # type: ignore[no-untyped-call]
    try:
        found = {(h.where, h.kind) for h in hookscope.find_hooks(model)}
    finally:
        for handle in handles:
            handle.remove()
    assert found == {("conv", "forward"), ("", "forward_pre"), ("head.weight", "post_accumulate_grad")}


# -- the stance: nested, overlapping, exceptions -----------------------------------------------------
def test_nested_blocks_and_an_exception_restore_the_compiled_code(models: Models) -> None:
    warm = models.get("warm")
    with (  # noqa: PT012
        pytest.warns(CaptureWarning, match=NOTE),
        pytest.raises(KeyError, match="escape"),
        hookscope.capture(warm.model, "conv") as outer,
    ):
        with hookscope.capture(warm.model, "head") as inner:
            warm.model(warm.x)
        warm.model(warm.x)  # the outer block is still open: still eager
        raise KeyError("escape")
    assert (len(outer["conv"].calls), len(inner["head"].calls)) == (2, 1)
    assert hookscope.find_hooks(warm.model) == []
    assert runs_compiled(warm.model, warm.net.conv, warm.x)


def test_blocks_that_close_out_of_order_keep_the_stance_until_the_last(models: Models) -> None:
    warm = models.get("warm")
    first, second = hookscope.capture(warm.model, "conv"), hookscope.capture(warm.model, "head")
    with pytest.warns(CaptureWarning, match=NOTE):
        first.__enter__()
        second.__enter__()
    warm.model(warm.x)
    first.__exit__(None, None, None)
    warm.model(warm.x)  # second is open: still eager, its hook fires
    second.__exit__(None, None, None)
    assert (len(first["conv"].calls), len(second["head"].calls)) == (1, 2)
    assert runs_compiled(warm.model, warm.net.conv, warm.x)


def test_the_note_as_an_error_leaves_no_hook_and_no_stance(models: Models) -> None:
    warm = models.get("warm")
    with pytest.raises(CaptureWarning, match=NOTE), hookscope.capture(warm.model, "conv"):  # warnings are errors
        pass
    assert hookscope.find_hooks(warm.model) == []
    assert runs_compiled(warm.model, warm.net.conv, warm.x)


# -- explain and store, through capture ----------------------------------------------------------
def test_gradcam_equals_the_eager_models(compiled: Compiled) -> None:
    model, eager, x = compiled.model, compiled.eager, compiled.x
    torch.testing.assert_close(hookscope.cam(model, x, method="gradcam", target=1), hookscope.cam(eager, x, target=1))
    layer = "conv" if compiled.how == "in_place" else "_orig_mod.conv"  # compiled in place: no _orig_mod
    at_conv = hookscope.cam(eager, x, method="gradcam", target=1, select="conv")
    torch.testing.assert_close(hookscope.cam(model, x, method="gradcam", target=1, select=layer), at_conv)


@pytest.mark.filterwarnings(NON_LEAF_GRAD)
def test_saliency_runs_the_compiled_model_and_equals_the_eager_one(models: Models) -> None:
    warm = models.get("warm")
    eager = hookscope.attribute(warm.eager, warm.x, "saliency", target=1)
    torch.testing.assert_close(hookscope.attribute(warm.model, warm.x, "saliency", target=1), eager)


@pytest.mark.filterwarnings(NON_LEAF_GRAD)
def test_guided_backprop_on_a_compiled_model(models: Models) -> None:
    warm = models.get("warm")
    eager = hookscope.attribute(warm.eager, warm.x, "guided_backprop", target=1)
    torch.testing.assert_close(hookscope.attribute(warm.model, warm.x, "guided_backprop", target=1), eager)


def test_extract_stores_the_eager_names_and_values(models: Models, tmp_path: Path) -> None:
    warm = models.get("warm")
    with pytest.warns(CaptureWarning, match=NOTE):
        run = hookscope.extract(warm.model, [warm.x], out=tmp_path / "acts.hookscope", select="conv", progress=False)
    assert list(run) == ["conv"]
    torch.testing.assert_close(run["conv"].output, warm.eager.conv(warm.x).detach())
    assert hookscope.find_hooks(warm.model) == []


# -- the true cause when nothing is captured -------------------------------------------------------
def test_a_model_inside_a_users_compiled_function_is_diagnosed() -> None:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    step = torch.compile(lambda x: mlp(x).sum())
    x = torch.randn(2, 3)
    with torch.no_grad():
        step(x)
    cause = r"nothing captured for '0': it was never called inside the block, and torch.compile has compiled code"
    with pytest.warns(CaptureWarning, match=cause), hookscope.capture(mlp, "0") as cap, torch.no_grad():
        step(x)
    assert cap["0"].calls == []
    with torch.compiler.set_stance("force_eager"), hookscope.capture(mlp, "0") as cap, torch.no_grad():
        step(x)  # the fix the message gives
    torch.testing.assert_close(cap["0"].output, mlp[0](x))
    usual = r"for '1': it was never called inside the block: the nn.Sequential that holds it"
    with pytest.warns(CaptureWarning, match=usual), hookscope.capture(mlp, ["0", "1"]):  # a site ran: no hint
        mlp[0](x)


# -- the command line --------------------------------------------------------------------------------
def test_cli_lists_a_compiled_model_and_loads_weights_either_way(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec, shape = "tests.core.test_compile:compiled_net", "random:1x3x6x6"
    weights = tmp_path / "compiled.pt"
    torch.save(compiled_net().state_dict(), weights)  # keys "_orig_mod.conv.weight", ...
    assert main(["list", spec, "--input", shape, "--weights", str(weights)]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert rows["(model)"][1] == "Net"
    assert rows["conv"][1:3] == ["Conv2d", "112"]
    assert " ".join(rows["conv"][3:]) == "(1, 4, 6, 6)"
    assert not any("_orig_mod" in name for name in rows)
    eager = tmp_path / "eager.pt"
    torch.save(Net(channels=3).state_dict(), eager)
    assert main(["list", spec, "--input", shape, "--weights", str(eager)]) == 0
