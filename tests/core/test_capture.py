"""The capture engine: in-place safety, aliasing, every call, policy, honest diagnostics."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookscope
from tests.models import ConvInplaceReLU, LeNet, SharedCell

ALL_GRADS = ("input", "output", "grad_input", "grad_output")


# -- in-place ops ----------------------------------------------------------------------------
def test_inplace_relu_keeps_pre_relu_values() -> None:
    """Conv2d then ReLU(inplace=True): the stored conv output still has its negative numbers."""
    torch.manual_seed(0)
    net = ConvInplaceReLU()
    x = torch.randn(2, 1, 6, 6)
    expected = net.conv(x).detach()
    with hookscope.capture(net, ["conv", "relu"], kinds=("input", "output")) as cap:
        net(x)
    assert (cap["conv"].output < 0).any()
    torch.testing.assert_close(cap["conv"].output, expected, rtol=0, atol=0)
    torch.testing.assert_close(cap["relu"].input, expected, rtol=0, atol=0)
    torch.testing.assert_close(cap["relu"].output, expected.relu(), rtol=0, atol=0)


def test_inplace_relu_gradients_match_an_out_of_place_oracle() -> None:
    """Grads around an in-place ReLU equal autograd.grad on the same net with ReLU out of place."""
    torch.manual_seed(0)
    net = ConvInplaceReLU().double()
    x = torch.randn(2, 1, 6, 6, dtype=torch.float64, requires_grad=True)
    with hookscope.capture(net, ["conv", "relu"], kinds=ALL_GRADS) as cap:
        net(x).pow(2).sum().backward()
    conv_out = net.conv(x)
    relu_out = torch.relu(conv_out)
    loss = net.head(relu_out.flatten(1)).pow(2).sum()
    d_conv, d_relu = torch.autograd.grad(loss, [conv_out, relu_out])
    torch.testing.assert_close(cap["conv"].grad_output, d_conv)
    torch.testing.assert_close(cap["relu"].grad_input, d_conv)
    torch.testing.assert_close(cap["relu"].grad_output, d_relu)


# -- aliasing ---------------------------------------------------------------------------------
def test_aliased_outputs_are_stored_once() -> None:
    """Identity and eval Dropout return their input: one copy serves every site that saw it."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 3), nn.Identity(), nn.Dropout(0.5)).eval()
    with hookscope.capture(net, None, kinds=("input", "output")) as cap:
        net(torch.randn(2, 3))
    linear_out = cap["0"].output
    assert cap["1"].input is linear_out and cap["1"].output is linear_out
    assert cap["2"].input is linear_out and cap["2"].output is linear_out


def test_a_tensor_changed_in_place_is_stored_again() -> None:
    """The alias table keys on the version counter: after ReLU(inplace) the values are new."""
    net = ConvInplaceReLU()
    with hookscope.capture(net, ["conv", "relu"], kinds=("output",)) as cap:
        net(torch.randn(1, 1, 6, 6))
    assert cap["relu"].output is not cap["conv"].output
    assert not torch.equal(cap["relu"].output, cap["conv"].output)


# -- every call recorded -------------------------------------------------------------------------
def test_a_shared_cell_has_one_record_per_call_with_its_own_gradient() -> None:
    """An RNN-style cell called 3 times: 3 calls in order, each with its output and grad_output."""
    torch.manual_seed(0)
    net = SharedCell().double()
    x = torch.randn(2, 4, dtype=torch.float64)
    with hookscope.capture(net, "cell", kinds=("input", "output", "grad_output")) as cap:
        net(x).sum().backward()
    calls = cap["cell"].calls
    assert [c.index for c in calls] == [0, 1, 2]
    assert [c.order for c in calls] == sorted(c.order for c in calls)

    h, pre = x, []
    for _ in range(3):
        pre.append(net.cell(h))
        h = torch.tanh(pre[-1])
    grads = torch.autograd.grad(h.sum(), pre)
    for call, out, grad in zip(calls, pre, grads, strict=True):
        torch.testing.assert_close(call.output, out.detach())
        torch.testing.assert_close(call.grad_output, grad)
    torch.testing.assert_close(cap["cell"].stack("output"), torch.stack([p.detach() for p in pre]))
    assert len(cap["cell"].values("grad_output")) == 3


def test_shortcuts_refuse_to_pick_one_of_several_calls() -> None:
    """.output on a site called twice raises AmbiguousCallError and says what to use instead."""
    net = LeNet()
    with hookscope.capture(net, "conv1") as cap:
        net(torch.randn(1, 3, 32, 32))
        net(torch.randn(1, 3, 32, 32))
    assert len(cap["conv1"].calls) == 2
    with pytest.raises(hookscope.AmbiguousCallError, match=r"called 2 times.*calls\[k\]\.output.*stack"):
        cap["conv1"].output


def test_a_selected_module_that_never_ran_warns_and_explains() -> None:
    """A selected module that was not called: a warning at exit and a clear error on access."""
    net = nn.ModuleDict({"used": nn.Linear(2, 2), "unused": nn.Linear(2, 2)})
    with (
        pytest.warns(hookscope.CaptureWarning, match=r"'unused': it was never called"),
        hookscope.capture(net, ["used", "unused"]) as cap,
    ):
        net["used"](torch.randn(1, 2))
    with pytest.raises(hookscope.NotCapturedError, match=r"no output for 'unused': it was never called"):
        cap["unused"].output


# -- gradients --------------------------------------------------------------------------------
def test_grad_input_is_the_gradient_with_respect_to_what_the_module_received() -> None:
    """grad_input of fc2 equals autograd.grad of the loss with respect to fc2's input tensor."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).double()
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    with hookscope.capture(net, ["0", "2"], kinds=("grad_input", "grad_output")) as cap:
        net(x).square().sum().backward()
    h = torch.tanh(net[0](x))
    loss = net[2](h).square().sum()
    d_x, d_h = torch.autograd.grad(loss, [x, h])
    torch.testing.assert_close(cap["0"].grad_input, d_x)
    torch.testing.assert_close(cap["2"].grad_input, d_h)


def test_grads_of_two_backward_passes_through_one_call_are_summed() -> None:
    """retain_graph and two backward passes: the grad is the sum, as Tensor.grad would be."""
    net = nn.Linear(2, 2).double()
    x = torch.randn(3, 2, dtype=torch.float64)
    with hookscope.capture(net, "", kinds="grad_output") as cap:
        y = net(x)
        (y * 2).sum().backward(retain_graph=True)
        (y * 3).sum().backward()
    torch.testing.assert_close(cap[""].grad_output, torch.full((3, 2), 5.0, dtype=torch.float64))


def test_param_grad_is_the_accumulated_grad_after_each_backward_pass() -> None:
    """param_grad: one entry per backward pass, equal to param.grad at that moment."""
    torch.manual_seed(0)
    net = LeNet()
    x = torch.randn(2, 3, 32, 32)
    with hookscope.capture(net, "fc3", kinds="param_grad") as cap:
        net(x).sum().backward()
        first = net.fc3.weight.grad.clone()
        net(x).square().sum().backward()
    grads = cap["fc3"].param_grads
    assert list(grads) == ["weight", "bias"]
    torch.testing.assert_close(grads["weight"][0], first)
    assert net.fc3.weight.grad is not None
    torch.testing.assert_close(grads["weight"][1], net.fc3.weight.grad)
    with pytest.raises(hookscope.AmbiguousCallError, match=r"several backward passes"):
        cap["fc3"].param_grad


def test_param_grad_of_a_single_pass() -> None:
    """With one backward pass the .param_grad shortcut is {name: param.grad}."""
    net = nn.Linear(3, 2)
    with hookscope.capture(net, "", kinds="param_grad") as cap:
        net(torch.randn(4, 3)).sum().backward()
    assert net.weight.grad is not None and net.bias.grad is not None
    torch.testing.assert_close(cap[""].param_grad["weight"], net.weight.grad)
    torch.testing.assert_close(cap[""].param_grad["bias"], net.bias.grad)


# -- honest about what cannot work ----------------------------------------------------------------
def test_no_backward_inside_the_block_warns() -> None:
    """Grad kinds requested, no backward before the block ends: a warning naming the layer."""
    net = LeNet()
    with (
        pytest.warns(hookscope.CaptureWarning, match=r"no grad_output for 'fc3': no backward pass ran inside"),
        hookscope.capture(net, "fc3", kinds="grad_output") as cap,
    ):
        net(torch.randn(1, 3, 32, 32)).sum()
    with pytest.raises(hookscope.NotCapturedError, match=r"no backward pass ran"):
        cap["fc3"].grad_output


def test_a_layer_the_loss_does_not_use_warns() -> None:
    """Backward ran but never reached a branch: 'did not reach it' names that branch only."""
    net = nn.ModuleDict({"used": nn.Linear(2, 2), "aux": nn.Linear(2, 2)})
    x = torch.randn(1, 2)
    with (
        pytest.warns(hookscope.CaptureWarning, match=r"no grad_output for 'aux': the backward pass did not reach"),
        hookscope.capture(net, ["used", "aux"], kinds="grad_output") as cap,
    ):
        net["aux"](x)
        net["used"](x).sum().backward()
    assert cap["used"].grad_output.shape == (1, 2)


def test_frozen_layers_warn_that_their_output_needs_no_grad() -> None:
    """A frozen first layer on an input without grad: the output cannot have a gradient."""
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    net[0].requires_grad_(False)
    with (
        pytest.warns(hookscope.CaptureWarning, match=r"no grad_output for '0': its output does not require grad"),
        hookscope.capture(net, ["0", "1"], kinds="grad_output") as cap,
    ):
        net(torch.randn(1, 2)).sum().backward()
    assert cap["1"].grad_output.shape == (1, 2)
    assert not net[0].weight.requires_grad  # nothing was unfrozen behind the user's back


def test_inference_mode_keeps_values_and_warns_for_grads() -> None:
    """inference_mode: outputs captured, grads explained."""
    net = nn.Linear(2, 2)
    with (
        pytest.warns(hookscope.CaptureWarning, match=r"inference_mode"),
        hookscope.capture(net, "", kinds=("output", "grad_output", "param_grad")) as cap,
        torch.inference_mode(),
    ):
        net(torch.randn(1, 2))
    assert cap[""].output.shape == (1, 2)


# -- storage policy ---------------------------------------------------------------------------------
def test_defaults_store_detached_copies() -> None:
    """By default nothing stored holds a graph or shares memory with the model's tensors."""
    net = nn.Linear(2, 2)
    with hookscope.capture(net, "", kinds=("input", "output")) as cap:
        x = torch.randn(1, 2, requires_grad=True)
        y = net(x)
    assert cap[""].output.grad_fn is None and not cap[""].output.requires_grad
    assert cap[""].output.data_ptr() != y.data_ptr()
    assert cap[""].input.data_ptr() != x.data_ptr()


def test_detach_false_keeps_the_graph() -> None:
    """detach=False: stored outputs can be differentiated further, e.g. for autograd.grad."""
    net = nn.Linear(2, 1).double()
    x = torch.randn(3, 2, dtype=torch.float64)
    with hookscope.capture(net, "", detach=False) as cap:
        net(x)
    (grad,) = torch.autograd.grad(cap[""].output.sum(), net.weight)
    torch.testing.assert_close(grad, x.sum(0, keepdim=True))


def test_clone_false_stores_references_and_warns_when_they_change() -> None:
    """clone=False stores the tensor itself; an in-place change afterwards is reported."""
    net = ConvInplaceReLU()
    with (
        pytest.warns(hookscope.CaptureWarning, match=r"'conv' out.*changed in place"),
        hookscope.capture(net, ["conv"], clone=False),
    ):
        net(torch.randn(1, 1, 6, 6))


def test_device_and_dtype_policy() -> None:
    """device moves copies (meta stands in for an accelerator); dtype casts floating tensors only."""

    class Embed(nn.Module):
        def forward(self, ids: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
            return ids.float() * scale

    net = Embed()
    with hookscope.capture(net, "", kinds=("input", "output"), device="meta", dtype=torch.float16) as cap:
        net(torch.tensor([1, 2]), torch.tensor(0.5))
    call = cap[""].calls[0]
    assert call.get("input", "args[0]").dtype == torch.int64
    assert call.get("input", "args[1]").dtype == torch.float16
    assert call.output.device.type == "meta" and call.output.dtype == torch.float16


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"kinds": ("outputs",)}, hookscope.OptionError, r"unknown kind 'outputs'; kinds are .*closest: 'output'"),
        ({"kinds": ()}, hookscope.OptionError, r"unknown kind nothing"),
        ({"device": "gpu9"}, hookscope.CaptureError, r"device='gpu9' is not a torch device"),
        ({"dtype": torch.int8}, hookscope.CaptureError, r"is not a floating torch dtype"),
    ],
)
def test_bad_options_are_one_line_errors(options: dict[str, object], error: type[Exception], message: str) -> None:
    """Bad options fail at hookscope.capture(...), before any hook exists."""
    net = nn.Linear(2, 2)
    with pytest.raises(error, match=message):
        hookscope.capture(net, **options)  # type: ignore[arg-type]
    assert hookscope.find_hooks(net) == []


# -- misuse -------------------------------------------------------------------------------------
def test_misuse_is_explained() -> None:
    """Reuse, taps outside the block, name clashes, unknown sites, selectors without a model."""
    net = nn.Sequential()
    net.add_module("conv1", nn.Linear(2, 2))
    cap = hookscope.capture(net, "conv1")
    with pytest.raises(hookscope.CaptureError, match=r"tap\(\) needs an active capture"):
        cap.tap(torch.zeros(1), "t")
    with cap:
        with pytest.raises(hookscope.CaptureError, match=r"already a module"):
            cap.tap(torch.zeros(1), "conv1")
        with pytest.raises(hookscope.CaptureError, match=r"expects a torch.Tensor"):
            cap.tap([1], "list")  # type: ignore[arg-type]
        net(torch.zeros(1, 2))
    with pytest.raises(hookscope.CaptureError, match=r"already used"), cap:
        pass
    with pytest.raises(hookscope.NotCapturedError, match=r"'conv_1' is not a site.*closest: 'conv1'"):
        cap["conv_1"]
    with pytest.raises(KeyError):
        cap["missing"]
    with pytest.raises(hookscope.NotCapturedError, match=r"pass kinds=\(\.\.\., 'grad_output'\)"):
        cap["conv1"].grad_output
    with pytest.raises(hookscope.CaptureError, match=r"a selector needs a model"):
        hookscope.capture(None, "0")


def test_the_module_that_raised_is_named_on_the_exception() -> None:
    """A forward that raises inside a selected module: the exception carries a note naming it."""

    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("bad shape")

    net = nn.Sequential(nn.Linear(2, 2), Boom())
    with pytest.raises(ValueError, match="bad shape") as info, hookscope.capture(net) as cap:
        net(torch.zeros(1, 2))
    assert "hookscope: raised inside module '1' (call 0)" in info.value.__notes__
    assert cap["1"].calls[0].error == "ValueError: bad shape"
    assert cap["0"].output.shape == (1, 2)  # what ran before the error is kept


def test_mapping_interface_and_repr() -> None:
    """A capture is a read-only mapping from site names to records."""
    net = LeNet()
    with hookscope.capture(net, ["conv1", "fc3"]) as cap:
        net(torch.randn(1, 3, 32, 32))
    assert list(cap) == ["conv1", "fc3"] and len(cap) == 2 and "fc3" in cap
    assert "<Capture of LeNet: 2 sites, 2 calls" in repr(cap)
    assert "output out (1, 10) float32" in repr(cap["fc3"].calls[0])


def test_only_selected_modules_carry_hooks_and_only_inside_the_block() -> None:
    """No hook on an unselected module, no global hook; a pre-hook only when input kinds are asked."""
    net = LeNet()
    x = torch.randn(1, 3, 32, 32)
    with hookscope.capture(net, ["conv2"], kinds="output"):
        inside = hookscope.find_hooks(net)
        net(x)
    assert [(h.where, h.kind) for h in inside] == [("conv2", "forward")]
    with hookscope.capture(net, ["fc1"], kinds=("input", "param_grad")):
        inside = hookscope.find_hooks(net)
        net(x).sum().backward()
    assert sorted((h.where, h.kind) for h in inside) == [
        ("fc1", "forward"),
        ("fc1", "forward_pre"),
        ("fc1.bias", "post_accumulate_grad"),
        ("fc1.weight", "post_accumulate_grad"),
    ]
    assert hookscope.find_hooks(net) == []


# -- reductions in the hook, and clearing ---------------------------------------------------------
def test_reduce_keeps_what_it_returns_and_copies_views() -> None:
    """A spatial mean is kept as is; a slice of the live tensor is copied before in-place ops hit it."""
    torch.manual_seed(0)
    net = ConvInplaceReLU().double()
    x = torch.randn(2, 1, 6, 6, dtype=torch.float64, requires_grad=True)
    conv_out = net.conv(x).detach()

    def spatial_mean(site: str, kind: str, key: str, t: torch.Tensor) -> torch.Tensor:
        return t.mean(dim=(2, 3)) if t.dim() == 4 else t

    with hookscope.capture(net, "conv", kinds=("output", "grad_output"), reduce=spatial_mean) as cap:
        net(x).sum().backward()
    torch.testing.assert_close(cap["conv"].output, conv_out.mean(dim=(2, 3)))
    assert cap["conv"].grad_output.shape == (2, 4)

    with hookscope.capture(net, "conv", reduce=lambda site, kind, key, t: t[:1]) as cap:
        net(x)
    assert (cap["conv"].output < 0).any()  # the slice was copied before ReLU(inplace) rewrote it
    torch.testing.assert_close(cap["conv"].output, conv_out[:1])


def test_reduce_returning_none_keeps_nothing_and_sees_every_site() -> None:
    """Running statistics: every (site, kind, key) reaches the reducer, aliases included; nothing is kept."""
    net = nn.Sequential(nn.Linear(3, 3), nn.Identity()).eval()
    seen: list[tuple[str, str, str, float]] = []

    def record(site: str, kind: str, key: str, t: torch.Tensor) -> None:
        seen.append((site, kind, key, t.sum().item()))

    x = torch.randn(2, 3, requires_grad=True)
    with hookscope.capture(net, None, kinds=("output", "grad_output"), reduce=record) as cap:
        net(x).sum().backward()
    assert [(s, k, key) for s, k, key, _ in seen if k == "output"] == [("0", "output", "out"), ("1", "output", "out")]
    assert {(s, k) for s, k, _, _ in seen} == {
        ("0", "output"),
        ("1", "output"),
        ("0", "grad_output"),
        ("1", "grad_output"),
    }
    assert cap["0"].calls[0].tensors["output"] == {}  # kept nothing, and no 'no backward' warning either
    seen.clear()
    with hookscope.capture(net, "0", kinds="param_grad", reduce=record) as cap:
        net(x).sum().backward()
    assert sorted((k, key) for _, k, key, _ in seen) == [("param_grad", "bias"), ("param_grad", "weight")]


def test_clear_forgets_the_calls_and_keeps_the_hooks() -> None:
    net = LeNet()
    with hookscope.capture(net, ["conv1"], kinds=("output", "param_grad")) as cap:
        net(torch.randn(1, 3, 32, 32)).sum().backward()
        cap.tap(torch.ones(1), "t", grad=False)
        cap.clear()
        assert cap["conv1"].calls == []
        assert "t" not in cap
        assert cap["conv1"].param_grads == {"weight": [], "bias": []}
        net(torch.randn(1, 3, 32, 32)).sum().backward()
    assert [c.index for c in cap["conv1"].calls] == [0]
    assert len(cap["conv1"].param_grads["weight"]) == 1
