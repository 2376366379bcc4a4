"""The hooks tutorial our users learn from, reproduced number for number."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookscope
from tests.models import LeNet


def test_tensor_taps_give_the_tutorial_gradients() -> None:
    """c = (x + y) * (x * y) at x=3, y=5: x.grad 55, y.grad 39, dc/da 15, dc/db 8."""
    x = torch.tensor([3.0], requires_grad=True)
    y = torch.tensor([5.0], requires_grad=True)
    with hookscope.capture() as cap:
        a = cap.tap(x + y, "a")
        b = cap.tap(x * y, "b")
        (a * b).backward()
    assert x.grad is not None and y.grad is not None
    assert x.grad.item() == 55.0 and y.grad.item() == 39.0
    assert cap["a"].grad.item() == 15.0 and cap["b"].grad.item() == 8.0
    assert cap["a"].value.item() == 8.0 and cap["b"].value.item() == 15.0


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 2, 3)
        self.pool1 = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool1(self.conv1(x))


def test_conv_channels_of_ones_and_twos() -> None:
    """A 3x3 kernel of ones sums 9 ones, of twos 18; the pre-hook input is the ones tensor."""
    net = Net()
    with torch.no_grad():
        net.conv1.weight[0].fill_(1.0)
        net.conv1.weight[1].fill_(2.0)
        net.conv1.bias.zero_()
    x = torch.ones(1, 1, 4, 4)
    with hookscope.capture(net, ["", "conv1"], kinds=("input", "output")) as cap:
        out = net(x)
    conv = cap["conv1"].output
    assert conv.shape == (1, 2, 2, 2)
    assert torch.equal(conv[0, 0], torch.full((2, 2), 9.0))
    assert torch.equal(conv[0, 1], torch.full((2, 2), 18.0))
    assert out.shape == (1, 2, 1, 1) and out.flatten().tolist() == [9.0, 18.0]
    assert torch.equal(cap["conv1"].output, cap["conv1"].calls[0].get("output", "out"))
    assert torch.equal(cap["conv1"].input, x)
    assert torch.equal(cap[""].input, x)
    assert torch.equal(cap[""].output, out)


def test_lenet_shapes_and_conv2_grad_output_match_autograd() -> None:
    """conv1/conv2 shapes are what the layers imply; conv2's grad_output equals autograd.grad."""
    torch.manual_seed(0)
    net = LeNet().double()
    x = torch.randn(1, 3, 32, 32, dtype=torch.float64)
    kinds = ("input", "output", "grad_output")
    with hookscope.capture(net, ["conv1", "conv2"], kinds=kinds) as cap:
        net(x).logsumexp(1).sum().backward()
    assert cap["conv1"].input.shape == (1, 3, 32, 32)
    assert cap["conv1"].output.shape == (1, 6, 28, 28)
    assert cap["conv2"].input.shape == (1, 6, 14, 14)
    assert cap["conv2"].output.shape == (1, 16, 10, 10)

    # Oracle: the same forward by hand, and torch.autograd.grad with respect to conv2's output.
    h = net.pool1(torch.relu(net.conv1(x)))
    conv2_out = net.conv2(h)
    h = net.pool2(torch.relu(conv2_out))
    h = torch.relu(net.fc2(torch.relu(net.fc1(h.flatten(1)))))
    loss = net.fc3(h).logsumexp(1).sum()
    (expected,) = torch.autograd.grad(loss, conv2_out)
    torch.testing.assert_close(cap["conv2"].output, conv2_out.detach(), rtol=0, atol=0)
    torch.testing.assert_close(cap["conv2"].grad_output, expected, rtol=1e-12, atol=1e-15)


def test_lenet_under_no_grad_keeps_forward_kinds_and_warns_for_grads() -> None:
    """Under no_grad the forward kinds are captured; the grad kinds get a warning naming layer and cause."""
    torch.manual_seed(0)
    net = LeNet()
    x = torch.randn(1, 3, 32, 32)
    kinds = ("input", "output", "grad_input", "grad_output")
    with (
        pytest.warns(hookscope.CaptureWarning, match=r"no grad_output for 'conv1', 'conv2': .*torch\.no_grad"),
        pytest.warns(hookscope.CaptureWarning, match=r"no grad_input for 'conv1', 'conv2': .*torch\.no_grad"),
        hookscope.capture(net, ["conv1", "conv2"], kinds=kinds) as cap,
        torch.no_grad(),
    ):
        net(x)
    assert cap["conv1"].output.shape == (1, 6, 28, 28)
    assert cap["conv2"].input.shape == (1, 6, 14, 14)
    with pytest.raises(hookscope.NotCapturedError, match=r"no grad_output for 'conv2'.*no_grad"):
        cap["conv2"].grad_output
