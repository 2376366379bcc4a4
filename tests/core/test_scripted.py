"""A ``torch.jit.script`` submodule in a selection: torch registers no hook on it, so every block
leaves it out with one CaptureWarning naming it, and a selector that names it is a SelectionError.

The oracle: the eager modules around the scripted one are computed by hand (``a(x)``, then the
scripted block, then ``b``), and torch's own refusal (``register_forward_hook`` on a script module
raises ``RuntimeError``) is what the blocks avoid.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope

D = torch.float64
LEFT_OUT = r"left out {n} TorchScript module\(s\) \({names}\): torch registers no hooks on a torch.jit.script module"


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(3, 4).to(D)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated, and says so
            self.enc = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU()).to(D))
        self.b = nn.Linear(4, 2).to(D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.enc(self.a(x)))


def test_torch_refuses_hooks_on_a_script_module() -> None:
    with pytest.raises(RuntimeError, match="register_forward_hook is not supported on ScriptModules"):
        Net().enc.register_forward_hook(lambda *_: None)


def test_capture_leaves_out_script_modules_a_pattern_or_the_default_matched() -> None:
    model, x = Net(), torch.randn(2, 3, dtype=D)
    with (
        pytest.warns(hookscope.CaptureWarning, match=LEFT_OUT.format(n=2, names="'enc.0', 'enc.1'")) as seen,
        hookscope.capture(model) as cap,
    ):
        model(x)
    assert "select the eager module that calls it ('', the model)" in str(seen[0].message)
    assert list(cap) == ["a", "b"]
    hidden = model.a(x)
    torch.testing.assert_close(cap["a"].output, hidden, rtol=0, atol=0)
    torch.testing.assert_close(cap["b"].output, model.b(torch.relu(model.enc[0](hidden))), rtol=1e-12, atol=1e-12)
    with (
        pytest.warns(hookscope.CaptureWarning, match=LEFT_OUT.format(n=3, names="'enc', 'enc.0', 'enc.1'")),
        hookscope.capture(model, "*") as cap,
    ):
        model(x)
    assert list(cap) == ["a", "b"]  # a glob leaves out the model itself
    assert hookscope.find_hooks(model) == []


@pytest.mark.parametrize("select", ["enc", ["a", "enc.0"], "model.enc"])
def test_a_script_module_named_by_the_selector_is_a_selection_error(select: object) -> None:
    model = Net()
    chosen = model.enc if select == "model.enc" else select
    name = "enc.0" if isinstance(select, list) else "enc"
    with pytest.raises(hookscope.SelectionError, match=rf"capture: '{re.escape(name)}' is a TorchScript module"):
        hookscope.capture(model, chosen)  # type: ignore[arg-type]
    assert hookscope.find_hooks(model) == []


def test_a_selection_of_script_modules_alone_is_a_selection_error() -> None:
    model = Net()
    with pytest.raises(hookscope.SelectionError, match=r"every module selected is a TorchScript module \('enc.0'"):
        hookscope.capture(model, "enc.*")
    with pytest.raises(hookscope.SelectionError, match=r"pass the eager model"):
        hookscope.capture(Net().enc)


def test_watch_edit_and_nan_guard_leave_them_out_or_refuse_them_alike() -> None:
    model, x = Net(), torch.randn(2, 3, dtype=D)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(hookscope.CaptureWarning, match=r"watch: " + LEFT_OUT.format(n=1, names="'enc.0'")):
        w = hookscope.watch(model, opt, every=1)
    with w:
        model(x).sum().backward()
        opt.step()
    assert set(w.histories()) == {"a", "b"}
    with pytest.warns(
        hookscope.CaptureWarning, match=r"nan_guard: " + LEFT_OUT.format(n=3, names="'enc', 'enc.0', 'enc.1'")
    ):
        guard = hookscope.nan_guard(model)
    with guard:
        model(x).sum().backward()
    with pytest.raises(hookscope.SelectionError, match=r"edit: 'enc' is a TorchScript module"):
        hookscope.edit(model, {"enc": hookscope.edits.zero()})
    with pytest.warns(
        hookscope.CaptureWarning, match=r"edit: " + LEFT_OUT.format(n=3, names="'enc', 'enc.0', 'enc.1'")
    ):
        edit = hookscope.edit(model, {"*": hookscope.edits.scale(2.0)})
    with edit:
        out = model(x)
    torch.testing.assert_close(out, 2 * model.b(model.enc(2 * model.a(x))), rtol=1e-12, atol=1e-12)
    assert hookscope.find_hooks(model, optimizer=opt) == []


def test_extract_leaves_them_out_of_the_store_too(tmp_path: Path) -> None:
    model, x = Net(), torch.randn(2, 3, dtype=D)
    with pytest.warns(hookscope.CaptureWarning, match=LEFT_OUT.format(n=2, names="'enc.0', 'enc.1'")):
        run = hookscope.extract(model, [x, x], out=tmp_path / "s", progress=False)
    assert list(run) == ["a", "b"]  # the store lists no site it could not fill
    torch.testing.assert_close(run.batch(1)["a"].calls[0].output, model.a(x), rtol=0, atol=0)
    assert hookscope.find_hooks(model) == []
