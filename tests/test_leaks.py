"""Leak tests: hookscope's hooks exist only inside the ``with`` block, whatever way it ends.

Hooks are counted two ways: directly, in every hook dict of every module and in every
parameter's ``_post_accumulate_grad_hooks``, and through ``hookscope.find_hooks``. Each test
checks the counts before, inside (so the counting is shown to see hookscope's hooks) and
after the block, for every kind alone and all kinds together, for a normal exit, an exception
in a forward, an exception inside ``backward()`` and an exception after backward. Tensor
hooks are checked by running a backward pass through a tensor kept from inside the block.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.optim.optimizer import register_optimizer_step_post_hook

import hookscope

MODULE_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs",
)
KIND_SETS = [(kind,) for kind in hookscope.KINDS] + [hookscope.KINDS]
KIND_IDS = [*hookscope.KINDS, "all"]
SELECTS: list[Any] = [None, lambda name, module: True]
SELECT_IDS = ["leaves", "every-module"]
EXITS = ("normal", "forward", "backward", "after_backward")


class Escape(Exception):
    """The user's own exception, raised inside the block after backward."""


class Boom(torch.autograd.Function):
    """Identity forward; a backward that raises."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        raise RuntimeError("boom in backward")


class Tripwire(nn.Module):
    """``x * 1``, or raise in forward (mode "forward"), or in backward (mode "backward")."""

    def __init__(self) -> None:
        super().__init__()
        self.mode = "ok"

    def forward(self, x: Tensor) -> Tensor:
        if self.mode == "forward":
            raise ValueError("boom in forward")
        return Boom.apply(x) if self.mode == "backward" else x * 1.0


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        OrderedDict(
            encoder=nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True)),
            trip=Tripwire(),
            head=nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 3)),
        )
    )


@pytest.fixture
def model() -> nn.Sequential:
    return make_model()


@pytest.fixture
def x() -> Tensor:
    return torch.randn(2, 4, requires_grad=True)


def hook_counts(model: nn.Module) -> dict[str, int]:
    """``{"<where>.<dict>": number of entries}`` for every module hook dict and parameter hook dict."""
    counts = {
        f"{name}.{attr}": len(getattr(module, attr))
        for name, module in model.named_modules()
        for attr in MODULE_HOOK_DICTS
    }
    for name, param in model.named_parameters():
        counts[f"{name}._post_accumulate_grad_hooks"] = len(getattr(param, "_post_accumulate_grad_hooks", None) or {})
    return counts


def flags(model: nn.Module) -> dict[str, bool]:
    """Every ``training`` flag and every ``requires_grad`` flag of the model."""
    return {f"{n}.training": m.training for n, m in model.named_modules()} | {
        f"{n}.requires_grad": p.requires_grad for n, p in model.named_parameters()
    }


def expected_warnings(kinds: tuple[str, ...]) -> contextlib.AbstractContextManager[Any]:
    """On a normal exit, param_grad warns about the parameterless ``trip`` (and ReLU); nothing else warns."""
    if "param_grad" in kinds:
        return pytest.warns(hookscope.CaptureWarning, match=r"no param_grad for .*'trip'.*no parameter that requires")
    return contextlib.nullcontext()


def body(model: nn.Sequential, x: Tensor, exit_: str) -> None:
    """What runs inside the block; ``exit_`` picks where (if anywhere) it raises."""
    model.trip.mode = exit_ if exit_ in ("forward", "backward") else "ok"
    y = model(x)
    y.sum().backward()
    if exit_ == "after_backward":
        raise Escape("raised after backward")


ERRORS: dict[str, tuple[type[Exception], str]] = {
    "forward": (ValueError, "boom in forward"),
    "backward": (RuntimeError, "boom in backward"),
    "after_backward": (Escape, "raised after backward"),
}


@contextlib.contextmanager
def exits(exit_: str, kinds: tuple[str, ...]) -> Iterator[pytest.ExceptionInfo[Exception] | None]:
    """Around a block that ends by ``exit_``: the exception must propagate, warnings must be the expected ones."""
    if exit_ == "normal":
        with expected_warnings(kinds):
            yield None
    else:
        error, match = ERRORS[exit_]
        with pytest.raises(error, match=match) as info:
            yield info


def run_capture(
    model: nn.Sequential,
    x: Tensor,
    kinds: tuple[str, ...],
    exit_: str,
    select: Any = None,
    inside: Callable[[], None] = lambda: None,
) -> pytest.ExceptionInfo[Exception] | None:
    """One capture ending by ``exit_``; ``inside()`` runs first thing inside the block."""
    with exits(exit_, kinds) as info, hookscope.capture(model, select, kinds=kinds):
        inside()
        body(model, x, exit_)
    return info


def hookscope_notes(exc: BaseException) -> list[str]:
    return [note for note in getattr(exc, "__notes__", []) if note.startswith("hookscope")]


# -- no module or parameter hook survives any exit ---------------------------------------------


@pytest.mark.parametrize("exit_", EXITS)
@pytest.mark.parametrize("kinds", KIND_SETS, ids=KIND_IDS)
@pytest.mark.parametrize("select", SELECTS, ids=SELECT_IDS)
def test_no_hook_survives_the_block(
    model: nn.Sequential, x: Tensor, select: Any, kinds: tuple[str, ...], exit_: str
) -> None:
    """Counted directly and by find_hooks: after the block every hook dict is as before it."""
    before, found_before = hook_counts(model), hookscope.find_hooks(model)
    during: dict[str, int] = {}
    run_capture(model, x, kinds, exit_, select, inside=lambda: during.update(hook_counts(model)))
    assert during != before, "the counts do not see hookscope's hooks"
    assert hook_counts(model) == before
    assert hookscope.find_hooks(model) == found_before == []
    assert not x._backward_hooks, "a tensor hook on the input outlived the block"


@pytest.mark.parametrize("kinds", KIND_SETS, ids=KIND_IDS)
def test_hooks_are_present_only_inside(model: nn.Sequential, x: Tensor, kinds: tuple[str, ...]) -> None:
    """find_hooks sees hookscope's hooks inside the block (every selected site) and none after."""
    inside: list[hookscope.HookInfo] = []
    run_capture(model, x, kinds, "normal", inside=lambda: inside.extend(hookscope.find_hooks(model)))
    assert {info.where for info in inside if info.kind == "forward"} == {
        "encoder.0",
        "encoder.1",
        "trip",
        "head.0",
        "head.1",
    }
    assert all("hookscope" in info.hook for info in inside)
    if "param_grad" in kinds:
        assert {info.where for info in inside if info.kind == "post_accumulate_grad"} == {
            n for n, _ in model.named_parameters()
        }
    assert hookscope.find_hooks(model) == []


# -- tensor hooks ------------------------------------------------------------------------------


def snapshot(cap: hookscope.Capture) -> dict[tuple[Any, ...], Tensor]:
    """Every tensor the capture holds, by (site, call, kind, key) and (site, param, pass)."""
    held = {
        (site, call.index, kind, key): tensor
        for site, record in cap.items()
        for call in record.calls
        for kind, tensors in call.tensors.items()
        for key, tensor in tensors.items()
    }
    held |= {
        (site, "param_grad", name, k): grad
        for site, record in cap.items()
        for name, grads in record.param_grads.items()
        for k, grad in enumerate(grads)
    }
    return held


@pytest.mark.parametrize("kinds", KIND_SETS, ids=KIND_IDS)
def test_backward_after_the_block_records_nothing(model: nn.Sequential, x: Tensor, kinds: tuple[str, ...]) -> None:
    """A backward pass through an output kept from inside the block adds or changes no gradient."""
    with expected_warnings(kinds), hookscope.capture(model, kinds=kinds) as cap:
        y = model(x)
        y.sum().backward(retain_graph=True)
    before = snapshot(cap)
    values = {key: t.clone() for key, t in before.items()}
    grad_kinds = {"grad_input", "grad_output", "param_grad"} & set(kinds)
    assert not grad_kinds or any(key[2] in grad_kinds or key[1] == "param_grad" for key in before)
    x_grad = x.grad.clone()

    (y * 3).sum().backward()

    assert not torch.equal(x.grad, x_grad), "the second backward pass did not run"
    after = snapshot(cap)
    assert after.keys() == before.keys()
    for key, tensor in after.items():
        assert tensor is before[key], key
        assert torch.equal(tensor, values[key]), key
    assert not y._backward_hooks and not x._backward_hooks


def test_tap_hook_does_not_outlive_the_block() -> None:
    """A tapped tensor's gradient hook is removed at exit: a later backward records nothing."""
    w = torch.randn(3, requires_grad=True)
    with hookscope.capture() as cap:
        t = cap.tap(w * 2, "t")
        t.sum().backward(retain_graph=True)
    grad = cap["t"].grad
    (t * 5).sum().backward()
    assert cap["t"].grad is grad
    assert len(cap["t"].calls) == 1
    assert not t._backward_hooks


def test_many_calls_past_handle_pruning_leave_no_hook(model: nn.Sequential) -> None:
    """Past the 1024 handles where HandleGroup prunes its list, every hook still goes at exit.

    Each pass's graph is freed by its backward, so the handles of its intermediate tensors die
    and get pruned; the inputs and the last output stay alive, and must lose their hooks.
    """
    before = hook_counts(model)
    inputs = [torch.randn(1, 4, requires_grad=True) for _ in range(150)]
    with hookscope.capture(model, kinds=("input", "output", "grad_input", "grad_output")) as cap:
        for xi in inputs[:-1]:
            model(xi).sum().backward()
        last = model(inputs[-1])
        last.sum().backward(retain_graph=True)
        registered = 2 * 5 * len(inputs)  # grad_input and grad_output hooks, 5 leaves, per pass
        assert len(cap._handles) < registered, "the pruning path did not run"
    assert hook_counts(model) == before
    assert hookscope.find_hooks(model) == []
    assert all(not t._backward_hooks for t in [*inputs, last])
    assert len(cap["head.1"].calls) == len(inputs)
    kept = cap["head.1"].calls[-1].grad_output
    (last * 2).sum().backward()
    assert cap["head.1"].calls[-1].grad_output is kept


# -- exceptions propagate, with a note naming the module that raised --------------------------


@pytest.mark.parametrize("kinds", KIND_SETS, ids=KIND_IDS)
@pytest.mark.parametrize("select", SELECTS, ids=SELECT_IDS)
def test_forward_exception_propagates_with_note(
    model: nn.Sequential, x: Tensor, select: Any, kinds: tuple[str, ...]
) -> None:
    """An exception in a selected module's forward propagates, with a note naming that module."""
    info = run_capture(model, x, kinds, "forward", select)
    assert info is not None
    assert hookscope_notes(info.value) == ["hookscope: raised inside module 'trip' (call 0)"]


def test_note_names_the_call_that_raised(model: nn.Sequential, x: Tensor) -> None:
    """When a module's second call raises, the note says call 1."""

    def block() -> None:
        with hookscope.capture(model):
            model(x)
            model.trip.mode = "forward"
            model(x)

    with pytest.raises(ValueError, match="boom in forward") as info:
        block()
    assert hookscope_notes(info.value) == ["hookscope: raised inside module 'trip' (call 1)"]


def test_forward_exception_in_unselected_module_gets_no_note(model: nn.Sequential, x: Tensor) -> None:
    """When the raising module is not captured, the exception propagates without a hookscope note."""
    info = run_capture(model, x, hookscope.KINDS, "forward", select="head.*")
    assert info is not None
    assert hookscope_notes(info.value) == []


@pytest.mark.parametrize("exit_", ["backward", "after_backward"])
def test_other_exceptions_propagate_without_note(model: nn.Sequential, x: Tensor, exit_: str) -> None:
    """An exception inside backward() or after it propagates unchanged: no module raised it."""
    info = run_capture(model, x, hookscope.KINDS, exit_)
    assert info is not None
    assert hookscope_notes(info.value) == []


def test_caught_forward_exception_is_not_blamed_for_a_later_one(model: nn.Sequential, x: Tensor) -> None:
    """A module's exception that the user caught must not be named on a later, unrelated exception."""

    def block() -> None:
        with hookscope.capture(model):
            model.trip.mode = "forward"
            with pytest.raises(ValueError, match="boom in forward"):
                model(x)
            model.trip.mode = "ok"
            model(x).sum().backward()
            raise Escape("raised after backward")

    with pytest.raises(Escape, match="raised after backward") as info:
        block()
    assert hookscope_notes(info.value) == []


# -- hooks the user registered, and the model's flags, are left alone --------------------------


def user_forward_pre_hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    CALLS.append("forward_pre")


def user_forward_hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
    CALLS.append("forward")


def user_backward_pre_hook(module: nn.Module, grad_output: tuple[Tensor, ...]) -> None:
    CALLS.append("backward_pre")


def user_backward_hook(module: nn.Module, grad_input: tuple[Tensor, ...], grad_output: tuple[Tensor, ...]) -> None:
    CALLS.append("backward")


def user_param_hook(param: Tensor) -> None:
    CALLS.append("post_accumulate_grad")


CALLS: list[str] = []
USER_HOOKS = {
    ("encoder.0", "forward_pre"): user_forward_pre_hook,
    ("trip", "forward"): user_forward_hook,
    ("head.1", "backward_pre"): user_backward_pre_hook,
    ("head.1", "backward"): user_backward_hook,
    ("encoder.0.weight", "post_accumulate_grad"): user_param_hook,
}


def register_user_hooks(model: nn.Sequential) -> None:
    model.encoder[0].register_forward_pre_hook(user_forward_pre_hook, with_kwargs=True)
    model.trip.register_forward_hook(user_forward_hook, always_call=True)
    model.head[1].register_full_backward_pre_hook(user_backward_pre_hook)
    model.head[1].register_full_backward_hook(user_backward_hook)
    model.encoder[0].weight.register_post_accumulate_grad_hook(user_param_hook)


@pytest.mark.parametrize("exit_", EXITS)
@pytest.mark.parametrize("kinds", KIND_SETS, ids=KIND_IDS)
def test_user_hooks_survive_and_are_reported(
    model: nn.Sequential, x: Tensor, kinds: tuple[str, ...], exit_: str
) -> None:
    """The user's hooks are kept (same objects), still fire, and find_hooks names them by qualname."""
    register_user_hooks(model)
    before, found_before = hook_counts(model), hookscope.find_hooks(model)
    dicts_before = {(n, a): dict(getattr(m, a)) for n, m in model.named_modules() for a in MODULE_HOOK_DICTS}
    run_capture(model, x, kinds, exit_)
    assert hook_counts(model) == before
    assert {(n, a): dict(getattr(m, a)) for n, m in model.named_modules() for a in MODULE_HOOK_DICTS} == dicts_before

    found = hookscope.find_hooks(model)
    assert found == found_before
    assert {(info.where, info.kind) for info in found} == set(USER_HOOKS)
    for info in found:
        hook = USER_HOOKS[info.where, info.kind]
        assert (
            info.hook
            == f"{hook.__module__}.{hook.__qualname__} ({hook.__code__.co_filename}:{hook.__code__.co_firstlineno})"
        )

    CALLS.clear()
    model.trip.mode = "ok"
    model(x).sum().backward()
    assert sorted(CALLS) == sorted(kind for _, kind in USER_HOOKS)


@pytest.mark.parametrize("exit_", EXITS)
@pytest.mark.parametrize("kinds", KIND_SETS, ids=KIND_IDS)
def test_training_and_requires_grad_are_untouched(
    model: nn.Sequential, x: Tensor, kinds: tuple[str, ...], exit_: str
) -> None:
    """``module.training`` and ``param.requires_grad`` are the same before, inside and after the block."""
    model.train()
    model.head.eval()
    model.encoder[0].bias.requires_grad_(False)
    before = flags(model)
    inside: dict[str, bool] = {}
    run_capture(model, x, kinds, exit_, inside=lambda: inside.update(flags(model)))
    assert inside == before
    assert flags(model) == before


def test_nested_captures_remove_only_their_own(model: nn.Sequential, x: Tensor) -> None:
    """An inner capture's exit leaves the outer capture's hooks; the outer exit removes the rest."""
    before = hook_counts(model)
    with hookscope.capture(model, kinds=hookscope.KINDS[:4]) as outer:
        outer_counts = hook_counts(model)
        with hookscope.capture(model, kinds=hookscope.KINDS[:4]) as inner:
            model(x).sum().backward()
        assert hook_counts(model) == outer_counts
        model(x).sum().backward()
    assert hook_counts(model) == before
    assert len(inner["head.1"].calls) == 1
    assert len(outer["head.1"].calls) == 2


# -- optimizers, scripted submodules and tensors: what find_hooks sees -------------------------


def scripted_model() -> nn.Sequential:
    """A Linear, a ReLU, then a ``torch.jit.script``ed Linear: torch refuses module hooks on the last."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated in torch 2.14
        scripted = torch.jit.script(nn.Linear(4, 2))
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), scripted)


@pytest.mark.parametrize(
    "block",
    [
        lambda m, o: hookscope.watch(m, o, every=1),
        lambda m, o: hookscope.nan_guard(m, o),
        lambda m, o: hookscope.capture(m),
    ],
    ids=["watch", "nan_guard", "capture"],
)
def test_a_scripted_submodule_is_left_out_and_the_block_leaves_no_hook(block: Callable[..., Any]) -> None:
    """torch refuses hooks on the scripted site: the block leaves it out (core.scripted), runs, and removes
    every hook it installed (the optimizer's, the first Linear's) when it ends."""
    model = scripted_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with (
        pytest.warns(hookscope.CaptureWarning, match=r"left out 1 TorchScript module\(s\) \('2'\)"),
        block(model, opt),
    ):
        model(torch.randn(2, 3)).sum().backward()
        opt.step()
    assert hookscope.find_hooks(model, optimizer=opt) == []
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    opt.zero_grad()
    model(torch.randn(2, 3)).sum().backward()
    before = model[0].weight.detach().clone()
    opt.step()  # leaked step hooks would make every later step raise
    assert model[0].weight.grad is not None
    torch.testing.assert_close(model[0].weight.detach(), before - 0.1 * model[0].weight.grad)


def user_step_pre_hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    CALLS.append("optimizer_step_pre")


def user_step_post_hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    CALLS.append("optimizer_step_post")


def user_grad_hook(grad: Tensor) -> None:
    CALLS.append("grad")


def named(hook: Callable[..., Any]) -> str:
    return f"{hook.__module__}.{hook.__qualname__} ({hook.__code__.co_filename}:{hook.__code__.co_firstlineno})"


def test_find_hooks_lists_optimizer_step_hooks_and_tensor_hooks(model: nn.Sequential, x: Tensor) -> None:
    """The user's step hooks (one optimizer's and torch's global ones) and tensor hooks, by name."""
    opts = [torch.optim.SGD(model.encoder.parameters(), lr=0.1), torch.optim.Adam(model.head.parameters())]
    handles = [
        opts[1].register_step_pre_hook(user_step_pre_hook),
        opts[1].register_step_post_hook(user_step_post_hook),
        register_optimizer_step_post_hook(user_step_post_hook),
        model.head[1].bias.register_hook(user_grad_hook),
    ]
    y = model(x)
    handles.append(y.register_hook(user_grad_hook))
    try:
        found = hookscope.find_hooks(model, optimizer=opts, tensors=y)
        assert sorted((i.where, i.kind, i.hook) for i in found) == sorted(
            [
                ("<optimizer 1: Adam>", "optimizer_step_pre", named(user_step_pre_hook)),
                ("<optimizer 1: Adam>", "optimizer_step_post", named(user_step_post_hook)),
                ("<global>", "optimizer_step_post", named(user_step_post_hook)),
                ("head.1.bias", "grad", named(user_grad_hook)),
                ("<tensor 0>", "grad", named(user_grad_hook)),
            ]
        )
        assert [i.where for i in hookscope.find_hooks(model, optimizer=opts[0])] == ["<global>", "head.1.bias"]
    finally:
        for handle in handles:
            handle.remove()
    assert hookscope.find_hooks(model, optimizer=opts, tensors=y) == []


@pytest.mark.parametrize("exit_", ["normal", "after_backward"])
@pytest.mark.parametrize("name", ["watch", "nan_guard"])
def test_training_blocks_hook_the_optimizer_only_inside(model: nn.Sequential, x: Tensor, name: str, exit_: str) -> None:
    """find_hooks sees the block's step hooks on each optimizer inside the block and none after it."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    block = hookscope.watch(model, opt) if name == "watch" else hookscope.nan_guard(model, opt)
    inside: list[hookscope.HookInfo] = []
    with exits(exit_, ()), block:
        inside += hookscope.find_hooks(model, optimizer=opt)
        body(model, x, exit_)
    kinds = {(i.where, i.kind) for i in inside if i.where.startswith("<optimizer")}
    assert kinds == {("<optimizer 0: SGD>", "optimizer_step_pre"), ("<optimizer 0: SGD>", "optimizer_step_post")}
    assert all("hookscope" in i.hook for i in inside)
    assert hookscope.find_hooks(model, optimizer=opt) == []
