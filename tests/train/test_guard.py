"""nan_guard on injected faults: the producer named, with its phase and step; downstream never blamed."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope import NonFiniteError, NonFiniteWarning

SYNCS = ["call", "pass"]


class Divide(nn.Module):
    """Divides by a countdown that the loop lowers by one each step: zero at step ``k``."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.register_buffer("denominator", torch.tensor(float(k)))

    def forward(self, x: Tensor) -> Tensor:
        return x / self.denominator


class Blow(torch.autograd.Function):
    """Identity forward; its backward returns inf times the gradient when ``armed``."""

    armed = True

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad * math.inf if Blow.armed else grad


class Blower(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return Blow.apply(x)  # type: ignore[no-any-return]


def divider(k: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 8), Divide(k)), nn.ReLU(), nn.Linear(8, 1))


def blower() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Sequential(Blower(), nn.Linear(8, 8)), nn.Linear(8, 1))


def no_hooks(model: nn.Module, opt: torch.optim.Optimizer | None = None) -> None:
    assert hookscope.find_hooks(model) == []
    if opt is not None:
        assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks


def countdown(model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        model[1][1].denominator -= 1


@pytest.mark.parametrize("sync", SYNCS)
def test_a_division_by_a_value_that_reaches_zero_is_found_at_its_step(sync: str) -> None:
    model = divider(3)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with (
        pytest.raises(NonFiniteError, match=r"^step 3, forward: output of '1\.1' \(call 0\) is ") as raised,
        hookscope.nan_guard(model, opt, sync=sync),
    ):  # type: ignore[arg-type]
        countdown(model, opt, 10)
    err = raised.value
    assert (err.step, err.phase, err.module, err.call, err.kind, err.key) == (3, "forward", "1.1", 0, "output", "out")
    assert err.value in ("inf and -inf", "nan and inf and -inf", "inf", "-inf", "nan")
    if sync == "call":  # the whole output divided by zero; max |x| of what it received is the Linear's output
        assert (err.count, err.numel) == (128, 128)
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
    expected = model[1][0](model[0](x)).abs().max().item()  # the weights did not change after step 3
    assert err.input_absmax == pytest.approx(expected, rel=1e-6)
    no_hooks(model, opt)
    assert torch.isfinite(model[0](x)).all()  # the model runs without the guard afterwards


@pytest.mark.parametrize("sync", SYNCS)
def test_a_backward_that_returns_inf_is_found_in_the_module_not_downstream(sync: str) -> None:
    model = blower()
    with (
        pytest.raises(NonFiniteError, match=r"step 0, backward: grad_input of '2\.0' \(call 0\) is ") as raised,
        hookscope.nan_guard(model, sync=sync),
    ):  # type: ignore[arg-type]
        model(torch.randn(16, 4)).sum().backward()
    err = raised.value
    assert (err.phase, err.module, err.kind, err.key) == ("backward", "2.0", "grad_input", "args[0]")
    assert "while its grad_output was finite" in str(err)
    no_hooks(model)


def test_detect_anomaly_names_an_autograd_op_downstream_where_the_guard_names_the_module() -> None:
    """Anomaly mode checks NaN, not inf: it stops at the op after the producer, an autograd node."""
    model = blower()
    x = torch.randn(16, 4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError) as anomaly, torch.autograd.detect_anomaly():
            model(x).sum().backward()
    said = str(anomaly.value)  # the op of the Linear before it (its weight's gradient), not Blow's
    assert "Function 'AddmmBackward0' returned nan values in its 2th output" in said
    assert any("Error detected in AddmmBackward0" in str(w.message) for w in seen)
    assert "Blow" not in said and "2.0" not in said  # neither the producer's op nor any module
    with pytest.raises(NonFiniteError) as guarded, hookscope.nan_guard(model):
        model(x).sum().backward()
    assert guarded.value.module == "2.0"


def test_a_learning_rate_that_blows_the_weights_up_is_found_in_the_optimizer_step() -> None:
    def run(guarded: bool) -> tuple[int, NonFiniteError | None]:
        model = nn.Sequential(nn.Linear(1, 1, bias=False))
        nn.init.constant_(model[0].weight, 1.0)
        opt = torch.optim.SGD(model.parameters(), lr=1e37)
        with hookscope.nan_guard(model, opt) if guarded else torch.enable_grad():
            for step in range(60):
                opt.zero_grad()
                model(torch.ones(1, 1)).sum().backward()  # d/dw = 1: the weight moves by -1e37 a step
                opt.step()
                if not torch.isfinite(model[0].weight).all():
                    return step, None
        return -1, None

    overflow, _ = run(guarded=False)  # the oracle: the plain loop, the first step after which w is inf
    assert overflow == 34  # 35 steps of 1e37 pass float32's 3.4e38
    with pytest.raises(NonFiniteError, match=r"^step 34, optimizer: parameter '0\.weight' became -inf in SGD") as err:
        run(guarded=True)
    assert (err.value.phase, err.value.module, err.value.kind, err.value.key, err.value.call) == (
        "optimizer",
        "0",  # the module that holds the parameter
        "param",
        "weight",
        None,
    )
    assert err.value.input_absmax == pytest.approx(34e37, rel=1e-3)


def test_an_input_that_is_already_non_finite_is_the_data_not_a_module() -> None:
    model = divider(3)
    x = torch.randn(2, 4)
    x[1, 2] = math.nan
    with (
        pytest.raises(NonFiniteError, match="the input of the model is already nan before any module ran") as err,
        hookscope.nan_guard(model),
    ):
        model(x)
    assert (err.value.module, err.value.kind, err.value.key, err.value.count, err.value.numel) == (
        "",
        "input",
        "args[0]",
        1,
        8,
    )
    no_hooks(model)


class Mask(nn.Module):
    """-inf above the diagonal (a causal mask); with ``all_of_row0`` also on the whole first row."""

    def __init__(self, all_of_row0: bool = False) -> None:
        super().__init__()
        self.all_of_row0 = all_of_row0

    def forward(self, scores: Tensor) -> Tensor:
        mask = torch.full_like(scores, -math.inf).triu(1)
        if self.all_of_row0:
            mask[..., 0, :] = -math.inf
        return mask


class Attention(nn.Module):
    def __init__(self, all_of_row0: bool = False) -> None:
        super().__init__()
        self.q, self.mask, self.softmax = nn.Linear(4, 4), Mask(all_of_row0), nn.Softmax(-1)

    def forward(self, x: Tensor) -> Tensor:
        scores = self.q(x) @ x.transpose(-1, -2)
        return self.softmax(scores + self.mask(scores)) @ x


def test_an_allowed_mask_with_minus_inf_is_not_reported_and_its_nan_downstream_is() -> None:
    torch.manual_seed(0)
    model, x = Attention(), torch.randn(2, 5, 4)
    with (
        pytest.raises(NonFiniteError, match=r"output of 'mask' \(call 0\) is -inf while its inputs were finite"),
        hookscope.nan_guard(model),
    ):
        model(x)
    for allow in ("mask", Mask, lambda name, module: name.endswith("mask")):
        with hookscope.nan_guard(model, allow=allow) as guard:
            model(x).sum().backward()
        assert guard.findings == []
    model.mask.all_of_row0 = True  # a fully masked row: softmax makes NaN of it
    nan = r"output of 'softmax' \(call 0\) is nan while its inputs were without NaN \(an allowed inf\)"
    with pytest.raises(NonFiniteError, match=nan), hookscope.nan_guard(model, allow="mask"):
        model(x)


class Heads(nn.Module):
    """A dict and a tuple out of one module: the broken leaf named by its key."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> dict[str, Any]:
        h = self.body(x)
        return {"logits": h, "extra": (h.detach(), torch.log(h - h))}  # log(0) = -inf


def test_dict_and_tuple_outputs_are_walked_and_the_leaf_named() -> None:
    model = nn.Sequential(Heads())
    said = r"output of '0' \(call 0\) is -inf .*\(out\['extra'\]\[1\]: 8 of 8"
    with pytest.raises(NonFiniteError, match=said) as err, hookscope.nan_guard(model):
        model(torch.randn(2, 4))
    assert err.value.key == "out['extra'][1]"


def test_warn_mode_goes_on_and_reports_each_producer_once() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), Divide(2), Blower(), nn.Linear(8, 1))
    x = torch.randn(16, 4)
    Blow.armed = False
    try:
        with pytest.warns(NonFiniteWarning) as warned, hookscope.nan_guard(model, mode="warn") as guard:
            for step in range(8):
                model[1].denominator.fill_(0.0 if step in (2, 3) else 1.0)  # NaN at steps 2 and 3
                Blow.armed = step >= 5  # inf gradients from step 5 on
                model(x).sum().backward()
                assert guard.step() == step + 1
    finally:
        Blow.armed = True
    found = [(e.step, e.phase, e.module, e.kind) for e in guard.findings]
    assert found == [(2, "forward", "1", "output"), (5, "backward", "2", "grad_input")]
    assert [str(w.message) for w in warned] == [str(e) for e in guard.findings]
    no_hooks(model)


def test_a_finite_training_loop_runs_unchanged() -> None:
    """Bit-identical losses and weights with and without the guard (both ways of reading)."""

    def train(guard: str | None) -> tuple[list[float], Tensor]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(inplace=True), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = torch.randn(24, 1, 8, 8), torch.randint(0, 3, (24,))
        losses = []
        with hookscope.nan_guard(model, opt, sync=guard) if guard else torch.enable_grad():  # type: ignore[arg-type]
            for step in range(12):
                loss = nn.functional.cross_entropy(model(x[step % 3 :: 3]), y[step % 3 :: 3])
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return losses, model[3].weight.detach().clone()

    plain = train(None)
    for sync in SYNCS:
        guarded = train(sync)
        assert guarded[0] == plain[0]
        assert torch.equal(guarded[1], plain[1])


def test_a_grad_scaler_skipping_a_step_for_inf_gradients_is_not_an_error() -> None:
    """GradScaler('cpu') with a huge scale: the first steps overflow and are skipped, then training goes on."""

    def run(pass_scaler: bool) -> tuple[Any, int]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-6)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)
        x = torch.randn(16, 4) * 100
        stepped = 0
        with hookscope.nan_guard(model, opt, scaler=scaler if pass_scaler else None) as guard:
            for _ in range(8):
                opt.zero_grad()
                scaler.scale(model(x).square().mean()).backward()
                scaler.step(opt)
                scaler.update()
            stepped = guard.step_index
        return guard, stepped

    guard, stepped = run(pass_scaler=True)
    assert guard.findings == [] and guard.skipped_steps >= 1
    assert stepped == 8 - guard.skipped_steps  # skipped steps are not counted
    with pytest.raises(NonFiniteError, match=r"^step 0, backward: the gradient arriving at the output of the model"):
        run(pass_scaler=False)


def test_options_are_checked() -> None:
    model = divider(1)
    with pytest.raises(hookscope.OptionError, match="mode must be 'raise' or 'warn'"):
        hookscope.nan_guard(model, mode="loud")  # type: ignore[arg-type]
    with pytest.raises(hookscope.OptionError, match=r"scaler= takes a torch\.amp\.GradScaler"):
        hookscope.nan_guard(model, scaler=1.0)
    with pytest.raises(hookscope.SelectionError):
        hookscope.nan_guard(model, allow="no_such_module")


def test_a_gradient_that_overflows_into_a_parameter_is_found_at_the_step() -> None:
    """Every module's gradients are finite; the weight's, summed over the batch, is not (4 x 2e38)."""
    model = nn.Sequential(nn.Linear(1, 1, bias=False))
    nn.init.constant_(model[0].weight, 1e-10)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    said = r"^step 0, backward: the gradient of parameter '0\.weight' is inf at SGD\.step\(\)"

    def step() -> None:
        model(torch.full((4, 1), 2e38)).sum().backward()
        opt.step()

    with pytest.raises(NonFiniteError, match=said) as err, hookscope.nan_guard(model, opt):
        step()
    assert (err.value.phase, err.value.module, err.value.kind, err.value.key) == (
        "backward",
        "0",
        "param_grad",
        "weight",
    )
    no_hooks(model, opt)


def test_evaluation_passes_are_checked_and_not_counted_and_a_model_output_is_walked() -> None:
    from transformers.modeling_outputs import BaseModelOutput

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body, self.divide = nn.Linear(4, 4), Divide(1)

        def forward(self, x: Tensor) -> BaseModelOutput:
            return BaseModelOutput(last_hidden_state=self.body(x), hidden_states=(self.divide(x),))

    model, x = Model(), torch.randn(2, 4)
    with hookscope.nan_guard(model) as guard:
        for _ in range(3):
            model(x).last_hidden_state.sum().backward()
        with torch.no_grad():
            model(x)
        assert guard.step_index == 2  # three training passes; the evaluation pass is not a step (but a call)
        model.divide.denominator.zero_()
        with pytest.raises(NonFiniteError, match=r"^step 2, forward: output of 'divide' \(call 2\)"), torch.no_grad():
            model(x)
    with pytest.raises(NonFiniteError, match=r"output of the model .* \(out\.hidden_states\[0\]: 8 of 8") as err:  # noqa: SIM117
        with hookscope.nan_guard(model, select=[""]):
            model(x)
    assert err.value.module == "" and err.value.key == "out.hidden_states[0]"
