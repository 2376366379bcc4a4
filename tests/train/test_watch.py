"""watch on a real training run: LeNet on scikit-learn's digits, its statistics against a hand computation."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import hookscope
from hookscope.zoo.lenet import LeNet, digits

BATCH = 32


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Any:
    """One thread: the machine's cores are shared, and one thread is also what makes a CPU run repeatable."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data() -> tuple[Tensor, Tensor]:
    return digits("train")


def train(model: nn.Module, opt: torch.optim.Optimizer, data: tuple[Tensor, Tensor], steps: int,
          *, during: Callable[[int], None] | None = None) -> list[float]:  # fmt: skip
    """Plain SGD-style steps over the digits in order; the losses, as Python floats."""
    x, y = data
    losses = []
    for step in range(steps):
        rows = torch.arange(step * BATCH, (step + 1) * BATCH) % len(y)
        loss = F.cross_entropy(model(x[rows]), y[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if during is not None:
            during(step)
    return losses


def lenet(seed: int = 0, lr: float = 1e-3) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = LeNet()
    return model, torch.optim.Adam(model.parameters(), lr=lr)


class Spy:
    """Our own hooks, as a user would write them: the outputs, output gradients and weights at one step."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, names: list[str], step: int) -> None:
        self.step, self.now = step, 0
        self.outputs: dict[str, list[Tensor]] = {n: [] for n in names}
        self.grads: dict[str, list[Tensor]] = {n: [] for n in names}
        self.before: dict[str, list[Tensor]] = {}
        self.param_grads: dict[str, list[Tensor]] = {}
        self.after: dict[str, list[Tensor]] = {}
        modules = dict(model.named_modules())
        self.handles = [modules[n].register_forward_hook(self._hook(n)) for n in names]
        self.params = {n: list(modules[n].parameters()) for n in names}
        self.handles.append(opt.register_step_pre_hook(lambda *a: self._pre()))
        self.handles.append(opt.register_step_post_hook(lambda *a: self._post()))

    def _hook(self, name: str) -> Any:
        def hook(module: nn.Module, args: Any, out: Tensor) -> None:
            if self.now == self.step and torch.is_grad_enabled():
                self.outputs[name].append(out.detach().clone().double())
                out.register_hook(lambda g: self.grads[name].append(g.double()))

        return hook

    def _pre(self) -> None:
        if self.now == self.step:
            self.before = {n: [p.detach().clone().double() for p in ps] for n, ps in self.params.items()}
            self.param_grads = {n: [p.grad.double() for p in ps if p.grad is not None] for n, ps in self.params.items()}

    def _post(self) -> None:
        if self.now == self.step:
            self.after = {n: [p.detach().clone().double() for p in ps] for n, ps in self.params.items()}
        self.now += 1

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def norm(tensors: list[Tensor]) -> float:
    return math.sqrt(sum(float(t.square().sum()) for t in tensors))


def expected(spy: Spy, name: str, unit_dim: int) -> dict[str, float]:
    x = torch.cat([o.flatten() for o in spy.outputs[name]])
    alive = torch.stack([(o != 0).movedim(unit_dim, 0).flatten(1).any(1) for o in spy.outputs[name]]).any(0)
    row = {"act_mean": float(x.mean()), "act_std": float(x.std()), "act_abs_mean": float(x.abs().mean()),
           "zeros": float((x == 0).double().mean()), "dead": float(1 - alive.double().mean()),
           "grad_output_norm": norm(spy.grads[name])}  # fmt: skip
    if spy.params[name]:
        delta = [a - b for a, b in zip(spy.after[name], spy.before[name], strict=True)]
        row.update(grad_norm=norm(spy.param_grads[name]), weight_norm=norm(spy.after[name]),
                   update_ratio=norm(delta) / norm(spy.before[name]))  # fmt: skip
    return row


def test_statistics_at_a_logged_step_equal_a_hand_computation(data: tuple[Tensor, Tensor]) -> None:
    model, opt = lenet()
    names = ["conv1", "relu1", "conv2", "relu3", "fc3"]
    spy = Spy(model, opt, names, step=6)
    with hookscope.watch(model, opt, every=3, thresholds={"dead_window": 1}) as w:
        train(model, opt, data, 8)
    spy.remove()
    assert w.steps == 8 and w.history("conv1").steps == [0, 3, 6]
    for name, dim in zip(names, (1, 1, 1, 1, 1), strict=True):
        got, want = w.history(name).row(6), expected(spy, name, dim)
        for column, value in want.items():
            assert got[column] == pytest.approx(value, rel=1e-5, abs=1e-9), (name, column)  # float32 sums
        if not spy.params[name]:
            assert math.isnan(got["grad_norm"]) and math.isnan(got["weight_norm"]) and math.isnan(got["update_ratio"])
    assert w.history("relu3").row(6)["zeros"] > 0.1  # a ReLU's output has zeros; the Linear before it none
    assert hookscope.find_hooks(model) == []


def test_watching_does_not_change_training(data: tuple[Tensor, Tensor], tmp_path: Any) -> None:
    model, opt = lenet(seed=3)
    plain = train(model, opt, data, 12)
    plain_state = {k: v.clone() for k, v in model.state_dict().items()}
    model, opt = lenet(seed=3)
    with hookscope.watch(model, opt, every=2, out=tmp_path / "run.hookscope"):
        watched = train(model, opt, data, 12)
    assert watched == plain  # bit-identical, loss by loss
    assert all(torch.equal(v, plain_state[k]) for k, v in model.state_dict().items())


def test_no_hook_is_left_after_the_block_also_after_an_exception(data: tuple[Tensor, Tensor]) -> None:
    model, opt = lenet()
    flags = [m.training for m in model.modules()], [p.requires_grad for p in model.parameters()]
    with hookscope.watch(model, opt, every=1):
        train(model, opt, data, 2)
    assert hookscope.find_hooks(model) == []
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks

    def boom(module: nn.Module, args: Any, out: Tensor) -> None:
        raise RuntimeError("boom in fc1")

    handle = model.fc1.register_forward_hook(boom)
    with pytest.raises(RuntimeError, match="boom in fc1"), hookscope.watch(model, opt, every=1) as w:
        train(model, opt, data, 2)
    handle.remove()
    assert hookscope.find_hooks(model) == []
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    assert flags == ([m.training for m in model.modules()], [p.requires_grad for p in model.parameters()])
    assert w.history("conv1").steps == [0]  # what ran before the exception is kept


def test_evaluation_passes_under_no_grad_are_ignored(data: tuple[Tensor, Tensor]) -> None:
    x, _ = data

    def evaluate(step: int) -> None:
        with torch.no_grad():
            model(x[:64])

    runs = []
    for during in (None, evaluate):
        model, opt = lenet(seed=1)
        with hookscope.watch(model, opt, every=2) as w:
            train(model, opt, data, 5, during=during)
        runs.append((w.steps, {n: w.history(n).rows for n, _ in w.sites}))
    assert runs[0][0] == runs[1][0] == 5
    for name, rows in runs[0][1].items():
        torch.testing.assert_close(runs[1][1][name], rows, rtol=0, atol=0, equal_nan=True)


def test_gradient_accumulation_adds_every_backward_pass_of_a_step(data: tuple[Tensor, Tensor]) -> None:
    x, y = data
    model, opt = lenet()
    spy = Spy(model, opt, ["conv2", "fc1"], step=2)
    with hookscope.watch(model, opt, every=2, thresholds={"dead_window": 1}) as w:
        for step in range(3):
            opt.zero_grad()
            for part in range(3):  # three micro-batches, one optimizer step
                rows = torch.arange((3 * step + part) * 16, (3 * step + part + 1) * 16)
                (F.cross_entropy(model(x[rows]), y[rows]) / 3).backward()
            opt.step()
    spy.remove()
    assert w.steps == 3 and len(spy.outputs["fc1"]) == 3
    for name in ("conv2", "fc1"):
        got, want = w.history(name).row(2), expected(spy, name, 1)
        assert got == pytest.approx({**got, **want}, rel=1e-5), name


def test_steps_are_counted_once_whoever_drives_them(data: tuple[Tensor, Tensor]) -> None:
    model, opt = lenet()
    with hookscope.watch(model, opt, every=2) as w:  # the optimizer and w.step() both: counted once
        train(model, opt, data, 5, during=lambda step: w.step())
    assert w.steps == 5 and w.history("fc3").steps == [0, 2, 4]
    with hookscope.watch(model, every=2) as w:  # no optimizer: w.step() alone
        train(model, opt, data, 3, during=lambda step: w.step())
    assert w.steps == 3 and w.history("fc3").steps == [0, 2]
    assert math.isnan(w.history("fc3").row(0)["update_ratio"]) and w.history("fc3").row(0)["grad_norm"] > 0


def test_several_optimizers_make_one_step_together(data: tuple[Tensor, Tensor]) -> None:
    x, y = data
    model, _ = lenet()
    body = torch.optim.SGD([p for n, p in model.named_parameters() if not n.startswith("fc3")], lr=0.01)
    head = torch.optim.Adam(model.fc3.parameters(), lr=1e-3)
    with hookscope.watch(model, [body, head], every=1) as w:
        for step in range(3):
            loss = F.cross_entropy(model(x[step * 8 : step * 8 + 8]), y[step * 8 : step * 8 + 8])
            body.zero_grad()
            head.zero_grad()
            loss.backward()
            body.step()
            head.step()
    assert w.steps == 3
    assert all(r > 0 for r in w.history("fc3")["update_ratio"] + w.history("conv1")["update_ratio"])
    assert not head._optimizer_step_post_hooks and not body._optimizer_step_pre_hooks


def test_wrong_options_are_one_line_errors() -> None:
    model, opt = lenet()
    with pytest.raises(hookscope.OptionError, match="every="):
        hookscope.watch(model, opt, every=0)
    with pytest.raises(hookscope.OptionError, match="thresholds= has no 'dying'"):
        hookscope.watch(model, opt, thresholds={"dying": 1})
    with pytest.raises(hookscope.OptionError, match="optimizer= takes"):
        hookscope.watch(model, "adam")  # type: ignore[arg-type]


def test_a_compiled_model_is_watched_on_its_logged_steps() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model = torch.compile(net, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        loss = F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 2))
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()  # compiled before the block
    with hookscope.watch(model, opt, every=2) as w:
        for _ in range(5):
            step()
    assert [name for name, _ in w.sites] == ["0", "1", "2"]  # the eager names
    assert w.history("0").steps == [0, 2, 4] and all(math.isfinite(v) for v in w.history("0")["act_std"])
    assert hookscope.find_hooks(model) == []
