"""The one hook-block lifecycle (``hookscope.core.block``) and every block built on it.

Each block is entered once (a second entry is ``BlockError``), and an entry that fails half-way
(an install that raises after some hooks are on, a ``KeyboardInterrupt``) leaves no hook on the
model nor on its optimizers. Oracles: ``find_hooks`` and the hook dicts counted by hand, an
optimizer step after the failure that runs and changes the weights as plain SGD does.
"""

from __future__ import annotations

import pathlib
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.core import hooks
from hookscope.core.block import Block
from hookscope.core.compiled import Eagerly
from hookscope.core.hooks import HandleGroup
from hookscope.transformer import recorder
from hookscope.transformer.rollout import MultiheadWeights


class Attention(nn.Module):
    """One ``nn.MultiheadAttention`` (what rollout reads) before a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True)
        self.head = nn.Linear(4, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.attn(x, x, x, need_weights=False)[0])


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


Opener = Callable[[nn.Module, torch.optim.Optimizer], Any]
# name: (model, the block, how many forward hooks go on before the one that fails half-way)
BLOCKS: dict[str, tuple[Callable[[], nn.Module], Opener, int]] = {
    "capture": (mlp, lambda m, o: hookscope.capture(m, kinds=("input", "output", "grad_output")), 1),
    "edit": (mlp, lambda m, o: hookscope.edit(m, {"0": hookscope.edits.scale(2.0), "2": hookscope.edits.zero()}), 1),
    "nan_guard": (mlp, lambda m, o: hookscope.nan_guard(m, o), 1),
    "watch": (mlp, lambda m, o: hookscope.watch(m, o, every=1), 1),  # after the optimizer's step hooks
    "multihead_weights": (Attention, lambda m, o: MultiheadWeights(m), 0),  # after its pre-hook
}


def model_input(model: nn.Module) -> Tensor:
    return torch.randn(2, 5, 4) if isinstance(model, Attention) else torch.randn(2, 3)


def no_hook_left(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Nothing on the model or the optimizer, and a training step runs as plain SGD (lr 0.1)."""
    assert hookscope.find_hooks(model, optimizer=optimizer) == []
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    optimizer.zero_grad()
    model(model_input(model)).sum().backward()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.step()
    for p, old in zip(model.parameters(), before, strict=True):
        assert p.grad is not None
        torch.testing.assert_close(p.detach(), old - 0.1 * p.grad)


@pytest.fixture
def fail_after(monkeypatch: pytest.MonkeyPatch) -> Callable[[int, BaseException], list[int]]:
    """``fail_after(n, exc)``: the (n + 1)-th forward hook installed raises ``exc``; returns a counter."""

    def arm(n: int, exc: BaseException) -> list[int]:
        installed = [0]
        real = HandleGroup.on_forward

        def on_forward(self: HandleGroup, module: nn.Module, hook: Any, *, always_call: bool = True) -> None:
            if installed[0] == n:
                raise exc
            real(self, module, hook, always_call=always_call)
            installed[0] += 1

        monkeypatch.setattr(HandleGroup, "on_forward", on_forward)
        return installed

    return arm


# -- the base class ----------------------------------------------------------------------------


class Counter(Block):
    """A block that counts the forward calls of ``model``'s modules; what ran is logged in ``order``."""

    noun, remake = "counter", "Counter(model)"

    def __init__(self, model: nn.Module, eager: Eagerly | None = None) -> None:
        super().__init__(eager)
        self.model, self.calls = model, 0
        self.order: list[str] = []

    def _install(self, handles: HandleGroup) -> None:
        for module in self.model.modules():
            handles.on_forward(module, self._count)

    def _count(self, module: nn.Module, args: Any, output: Any) -> None:
        self.calls += 1

    def _release(self) -> None:
        self.order.append(f"release with {len(hookscope.find_hooks(self.model))} hooks")

    def _finish(self, exc: BaseException | None) -> None:
        self.order.append(f"finish {type(exc).__name__} with {len(hookscope.find_hooks(self.model))} hooks")


def test_a_block_goes_new_active_closed_and_is_entered_once() -> None:
    model = mlp()
    block = Counter(model)
    assert block.state == "new"
    with block:
        assert block.state == "active" and len(hookscope.find_hooks(model)) == 4  # the Sequential and its 3
        with pytest.raises(hookscope.BlockError, match=r"this counter is open; .* make a new one with Counter\("):
            block.__enter__()
        model(torch.randn(1, 3))
    assert block.state == "closed" and block.calls == 4
    assert block.order == ["release with 0 hooks", "finish NoneType with 0 hooks"]
    with pytest.raises(hookscope.BlockError, match=r"this counter was already used; .* Counter\(model\)"):
        block.__enter__()
    assert hookscope.find_hooks(model) == []


def test_exit_removes_every_hook_before_finish_and_swallows_nothing() -> None:
    model = mlp()
    block = Counter(model)
    with pytest.raises(KeyboardInterrupt), block:
        raise KeyboardInterrupt
    assert block.order == ["release with 0 hooks", "finish KeyboardInterrupt with 0 hooks"]

    class Failing(Counter):
        def _finish(self, exc: BaseException | None) -> None:
            raise ValueError("finish failed")

    failing = Failing(model)
    with pytest.raises(ValueError, match="finish failed"), failing:
        model(torch.randn(1, 3))
    assert hookscope.find_hooks(model) == [] and failing.state == "closed"


@pytest.mark.parametrize("exc", [RuntimeError("install failed"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_an_entry_that_fails_half_way_removes_what_it_installed(
    fail_after: Callable[[int, BaseException], list[int]], exc: BaseException
) -> None:
    model = mlp()
    installed = fail_after(2, exc)
    block = Counter(model)
    with pytest.raises(type(exc)):
        block.__enter__()
    assert installed == [2], "the failure did not come half-way"
    assert hookscope.find_hooks(model) == [] and block.state == "closed"
    assert block.order == ["release with 0 hooks"]  # no finish: the block never opened
    with pytest.raises(hookscope.BlockError, match="already used"):
        block.__enter__()


def test_a_stance_that_fails_to_open_removes_the_hooks() -> None:
    """The stance opens last, inside the same try (a compiled model's warning turned error)."""
    model = mlp()
    eager = Eagerly(None)
    closed: list[bool] = []

    def fail() -> None:
        raise hookscope.CaptureWarning("turned into an error")

    eager.open = fail  # type: ignore[method-assign]
    eager.close = lambda: closed.append(True)  # type: ignore[method-assign]
    with pytest.raises(hookscope.CaptureWarning, match="turned into an error"):
        Counter(model, eager).__enter__()
    assert hookscope.find_hooks(model) == [] and closed == [True]


# -- every block of hookscope ------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BLOCKS))
def test_every_block_is_entered_once(name: str) -> None:
    make, open_, _ = BLOCKS[name]
    model = make()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    block = open_(model, optimizer)
    assert isinstance(block, Block)
    with block:
        model(model_input(model)).sum().backward()
        optimizer.step()
        with pytest.raises(hookscope.BlockError, match=rf"this {block.noun} is open"):
            block.__enter__()
    with pytest.raises(hookscope.BlockError, match=rf"this {block.noun} was already used; .*make a new one"):
        block.__enter__()
    no_hook_left(model, optimizer)


@pytest.mark.parametrize("exc", [RuntimeError("install failed"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
@pytest.mark.parametrize("name", list(BLOCKS))
def test_every_block_failing_half_way_leaves_no_hook(
    fail_after: Callable[[int, BaseException], list[int]], name: str, exc: BaseException
) -> None:
    make, open_, n = BLOCKS[name]
    model = make()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    block = open_(model, optimizer)
    installed = fail_after(n, exc)
    with pytest.raises(type(exc)), block:
        pytest.fail("the block opened")
    assert installed == [n], "the failure did not come half-way"
    no_hook_left(model, optimizer)


@pytest.mark.parametrize("exc", [RuntimeError("install failed"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_the_attention_recorder_failing_half_way_restores_the_registry(
    monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    """Both implementations are wrapped, then joining the active recorders fails: the registry is as before."""
    registry = pytest.importorskip("transformers.modeling_utils").ALL_ATTENTION_FUNCTIONS
    model = nn.Linear(2, 2)
    model.config = types.SimpleNamespace(_attn_implementation="sdpa")  # type: ignore[assignment]
    model.add_module("inner", nn.Linear(2, 2))
    model.inner.config = types.SimpleNamespace(_attn_implementation="eager")  # type: ignore[assignment]
    local = dict(registry._local_mapping)

    def failing(table: Any) -> None:
        assert set(recorder._INSTALLED) == {"eager", "sdpa"}  # half-way: both wrapped
        raise exc

    block = recorder.recording(model, lambda module, probs: None)
    with monkeypatch.context() as patch:
        patch.setattr(recorder, "_Listening", failing)
        with pytest.raises(type(exc)), block:
            pytest.fail("the block opened")
    assert dict(registry._local_mapping) == local and recorder._INSTALLED == {} and recorder._ACTIVE == []
    with pytest.raises(hookscope.BlockError, match="this attention recorder was already used"):
        block.__enter__()
    with recorder.recording(model, lambda module, probs: None):
        assert registry["sdpa"].__name__ == "hookscope_recorded_sdpa"
    assert dict(registry._local_mapping) == local


def test_every_register_call_goes_through_core_hooks() -> None:
    """Only core/hooks.py calls torch's ``register_*`` functions (find_hooks could not see the others)."""
    root = pathlib.Path(hooks.__file__).parent.parent
    callers = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if any(".register_" in line and "``" not in line for line in path.read_text().splitlines())
    )
    assert callers == ["core/hooks.py"]
