"""Copies from an accelerator to the host that the forward pass does not wait for.

From a CUDA tensor to ``device="cpu"`` (detached), the hook snapshots the tensor on the GPU (a
device-to-device clone on the current stream, so a later in-place op cannot reach it), and a side
stream copies the snapshot into pinned host memory while the model runs on; ``wait()`` blocks
until every copy has landed. ``hookscope.core.policy.Keeper`` decides when to use it. The stream
work goes through a small ``Streams`` interface, so the contract is tested on the CPU with a
stand-in (tests/core/test_policy.py) and on a GPU by benchmarks/gpu.py.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor


class HostBound(Protocol):
    """What the copier needs of a storage policy (``hookscope.core.policy.Policy`` is one)."""

    @property
    def to_host(self) -> bool:
        """Detached copies bound for the CPU."""

    @property
    def dtype(self) -> torch.dtype | None:
        """The floating dtype copies are cast to, if any."""


class Streams(Protocol):
    """The stream operations the asynchronous copy needs (``CudaStreams``, or a stand-in in tests)."""

    def accepts(self, tensor: Tensor) -> bool:
        """Whether ``tensor`` lives on a device these streams serve."""

    def side_stream(self, device: torch.device) -> Any:
        """A new stream on ``device`` for the copies."""

    def wait_for_current(self, stream: Any, device: torch.device) -> None:
        """Make ``stream`` wait for the work queued so far on ``device``'s current stream."""

    def pinned_like(self, tensor: Tensor) -> Tensor:
        """Uninitialised page-locked host memory of ``tensor``'s shape, strides and dtype."""

    def copy(self, stream: Any, dst: Tensor, src: Tensor) -> None:
        """Queue ``dst.copy_(src)`` on ``stream`` without waiting for it."""

    def keep_alive(self, tensor: Tensor, stream: Any) -> None:
        """Keep ``tensor``'s memory from being reused until ``stream``'s queued work is done."""

    def synchronize(self, stream: Any) -> None:
        """Block until everything queued on ``stream`` is done."""


class CudaStreams:
    """``Streams`` on CUDA: torch's caching allocators for the snapshot and the pinned buffer."""

    def accepts(self, tensor: Tensor) -> bool:
        return tensor.is_cuda

    def side_stream(self, device: torch.device) -> Any:
        return torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]

    def wait_for_current(self, stream: Any, device: torch.device) -> None:
        stream.wait_stream(torch.cuda.current_stream(device))

    def pinned_like(self, tensor: Tensor) -> Tensor:
        return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, pin_memory=True)

    def copy(self, stream: Any, dst: Tensor, src: Tensor) -> None:
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)

    def keep_alive(self, tensor: Tensor, stream: Any) -> None:
        tensor.record_stream(stream)

    def synchronize(self, stream: Any) -> None:
        stream.synchronize()


class AsyncCopier:
    """Device-to-host copies that the forward pass does not wait for (see the module docstring)."""

    def __init__(self, streams: Streams, dtype: torch.dtype | None) -> None:
        self.streams = streams
        self.dtype = dtype
        self._side: dict[torch.device, Any] = {}
        self._pending: dict[torch.device, Any] = {}  # devices with copies not yet waited for

    def copy(self, tensor: Tensor) -> Tensor:
        """A host tensor that holds ``tensor``'s values once ``wait()`` returns."""
        cast = self.dtype if self.dtype is not None and tensor.is_floating_point() else None
        snapshot = tensor.detach().to(dtype=cast, copy=True)  # on the current stream: before any later in-place op
        device = snapshot.device
        stream = self._side.get(device)
        if stream is None:
            stream = self._side[device] = self.streams.side_stream(device)
        self.streams.wait_for_current(stream, device)
        host = self.streams.pinned_like(snapshot)
        self.streams.copy(stream, host, snapshot)
        self.streams.keep_alive(snapshot, stream)
        self._pending[device] = stream
        return host

    def wait(self) -> None:
        """Block until every copy queued so far has landed."""
        while self._pending:  # popitem: backward threads may queue copies meanwhile
            _, stream = self._pending.popitem()
            self.streams.synchronize(stream)


def async_copier(policy: HostBound, streams: Streams | None = None) -> AsyncCopier | None:
    """The asynchronous host copier for ``policy``, or None where every copy is synchronous."""
    return AsyncCopier(streams or CudaStreams(), policy.dtype) if policy.to_host else None
