"""The storage policy's copy strategies, the asynchronous host copy included, tested on the CPU.

The asynchronous path (CUDA tensor -> pinned host memory on a side stream) is driven through the
``Streams`` interface. ``DeferredStreams`` stands in for CUDA here: it serves CPU tensors, hands
out NaN-filled "pinned" buffers, and runs a stream's queued copies only when the stream is
synchronised, as a side stream the host never waited for would. What is tested is hookscope's
side of the contract: the snapshot is taken before any later in-place op, the side stream waits
for the current one, the snapshot is kept alive for the side stream, and nothing is read before
the copies have landed (end of block, ``cap[name]``, a second backward pass summed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.core import host_copy
from hookscope.core.host_copy import AsyncCopier, CudaStreams, async_copier
from hookscope.core.policy import Keeper, Policy
from tests.models import ConvInplaceReLU


class DeferredStreams:
    """A CPU stand-in for CUDA streams: copies wait in their stream's queue until it is synchronised."""

    def __init__(self) -> None:
        self.queues: dict[int, list[Callable[[], None]]] = {}
        self.log: list[tuple[str, Any]] = []
        self.alive: list[Tensor] = []

    def accepts(self, tensor: Tensor) -> bool:
        return tensor.device.type == "cpu"

    def side_stream(self, device: torch.device) -> int:
        stream = len(self.queues)
        self.queues[stream] = []
        self.log.append(("side_stream", device))
        return stream

    def wait_for_current(self, stream: int, device: torch.device) -> None:
        self.log.append(("wait_for_current", stream))

    def pinned_like(self, tensor: Tensor) -> Tensor:
        self.log.append(("pinned_like", tuple(tensor.shape)))
        return torch.full_like(tensor, float("nan") if tensor.is_floating_point() else -1)  # garbage until the copy

    def copy(self, stream: int, dst: Tensor, src: Tensor) -> None:
        self.log.append(("copy", stream))
        self.queues[stream].append(lambda: dst.copy_(src))

    def keep_alive(self, tensor: Tensor, stream: int) -> None:
        self.log.append(("keep_alive", stream))
        self.alive.append(tensor)

    def synchronize(self, stream: int) -> None:
        self.log.append(("synchronize", stream))
        queued, self.queues[stream] = self.queues[stream], []
        for run in queued:
            run()

    def pending(self) -> int:
        return sum(len(q) for q in self.queues.values())


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch) -> DeferredStreams:
    """Every capture made in the test copies through one DeferredStreams."""
    fake = DeferredStreams()
    monkeypatch.setattr(host_copy, "CudaStreams", lambda: fake)
    return fake


# -- which strategy --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "asynchronous"),
    [
        ({"device": "cpu"}, True),
        ({"device": "cpu", "dtype": torch.float16}, True),
        ({"device": "cpu", "clone": False}, True),
        ({"device": "cpu", "detach": False}, False),  # keeps the graph: a differentiable .to()
        ({}, False),
        ({"device": "meta"}, False),
        ({"dtype": torch.float16}, False),
    ],
)
def test_the_asynchronous_copier_serves_detached_copies_to_the_host(
    options: dict[str, Any], asynchronous: bool
) -> None:
    made = Policy.make(**{"detach": True, "clone": True, "device": None, "dtype": None} | options)
    copier = async_copier(made)
    assert (copier is not None) == asynchronous
    if copier is not None:
        assert isinstance(copier, AsyncCopier) and isinstance(copier.streams, CudaStreams)


def test_cuda_streams_leave_cpu_tensors_to_the_synchronous_copy() -> None:
    """On a CPU tensor the CUDA copier never starts: no CUDA call on a machine without a GPU."""
    assert not CudaStreams().accepts(torch.zeros(2))
    net = ConvInplaceReLU()
    x = torch.randn(1, 1, 6, 6)
    with hookscope.capture(net, "conv", device="cpu") as cap:
        net(x)
    torch.testing.assert_close(cap["conv"].output, net.conv(x).detach(), rtol=0, atol=0)


# -- the asynchronous copy's contract ------------------------------------------------------------------
def test_copies_land_by_the_end_of_the_block_and_survive_in_place_ops(streams: DeferredStreams) -> None:
    """The conv output is snapshotted before ReLU(inplace) runs; the copy lands at exit."""
    torch.manual_seed(0)
    net = ConvInplaceReLU()
    x = torch.randn(2, 1, 6, 6)
    expected = net.conv(x).detach()
    with hookscope.capture(net, ["conv", "relu"], device="cpu") as cap:
        net(x)
        assert streams.pending() == 2  # nothing waited for inside the forward pass
    assert streams.pending() == 0
    assert (cap["conv"].output < 0).any()
    torch.testing.assert_close(cap["conv"].output, expected, rtol=0, atol=0)
    torch.testing.assert_close(cap["relu"].output, expected.relu(), rtol=0, atol=0)


def test_each_copy_is_ordered_and_kept_alive_on_one_side_stream(streams: DeferredStreams) -> None:
    net = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    with hookscope.capture(net, None, device="cpu"):
        net(torch.randn(2, 3))
    steps = [name for name, _ in streams.log]
    one_copy = ["wait_for_current", "pinned_like", "copy", "keep_alive"]
    assert steps == ["side_stream", *one_copy, *one_copy, "synchronize"]
    assert streams.alive[0].data_ptr() != 0 and len(streams.alive) == 2


def test_a_lookup_inside_the_block_waits_for_the_copies(streams: DeferredStreams) -> None:
    net = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    with hookscope.capture(net, "", device="cpu") as cap:
        y = net(x)
        assert streams.pending() == 1
        torch.testing.assert_close(cap[""].output, y.detach())
        assert streams.pending() == 0


def test_a_second_backward_pass_is_summed_after_the_copies_land(streams: DeferredStreams) -> None:
    net = nn.Linear(3, 2).double()
    x = torch.randn(4, 3, dtype=torch.float64)
    with hookscope.capture(net, "", kinds=("grad_output",), device="cpu") as cap:
        y = net(x)
        (y * 3).sum().backward(retain_graph=True)
        (y * 3).sum().backward()
    torch.testing.assert_close(cap[""].grad_output, torch.full((4, 2), 6.0, dtype=torch.float64))


def test_the_host_copy_casts_floating_tensors_only(streams: DeferredStreams) -> None:
    class Embed(nn.Module):
        def forward(self, ids: Tensor, scale: Tensor) -> Tensor:
            return ids.float() * scale

    net = Embed()
    with hookscope.capture(net, "", kinds=("input", "output"), device="cpu", dtype=torch.float16) as cap:
        net(torch.tensor([1, 2]), torch.tensor(0.5))
    call = cap[""].calls[0]
    assert call.get("input", "args[0]").dtype == torch.int64
    assert call.output.dtype == torch.float16
    torch.testing.assert_close(call.output, torch.tensor([0.5, 1.0], dtype=torch.float16))


def test_aliases_are_copied_once_on_the_asynchronous_path(streams: DeferredStreams) -> None:
    net = nn.Sequential(nn.Linear(3, 3), nn.Identity()).eval()
    with hookscope.capture(net, None, device="cpu") as cap:
        net(torch.randn(2, 3))
    assert cap["1"].output is cap["0"].output
    assert [name for name, _ in streams.log].count("copy") == 1


def test_keeper_wait_is_a_no_op_without_asynchronous_copies() -> None:
    keeper = Keeper(Policy())
    kept = keeper.keep(torch.ones(2), ("site", "output", "out"))
    keeper.wait()
    assert kept is not None and torch.equal(kept, torch.ones(2))
