"""What is kept of a tensor a hook sees: detached, copied, moved, cast; aliases stored once.

Defaults, and why:

* ``detach=True``: nothing stored holds an autograd graph (no leaked activations, no
  "backward through the graph a second time"). ``detach=False`` keeps the graph, so stored
  tensors can be differentiated further (``clone()`` is differentiable).
* ``clone=True``: a later in-place op (``ReLU(inplace=True)``) cannot rewrite what was stored
  (pytorch/captum#156). ``clone=False`` stores references and warns if one was modified.
* ``device=None``: stay where the tensor is; ``device="cpu"`` moves copies off the accelerator.
* ``dtype=None``: keep the dtype; a floating dtype casts floating tensors only (integer ids,
  masks and indices keep theirs).

Outputs that alias each other (``nn.Identity``, eval-mode ``Dropout``, a layer's output that
is the next layer's input) are copied once and shared while the source is unchanged: the same
address and version, then the same shape, stride, dtype and device (looked at only when the address
and version were seen before, which most calls' were not), and the source still alive.

A ``reduce`` function ``(site, kind, key, tensor) -> tensor | None`` runs in the hook, on the
detached tensor, before anything is kept: a spatial mean, a slice, top-k channels, or running
statistics that keep nothing (return None). What it returns is copied only when it still shares
memory with the model's tensor (a slice, a view); ``device`` and ``dtype`` apply after it.

From a CUDA tensor to ``device="cpu"`` (detached), the copy does not stall the forward pass
(``hookscope.core.host_copy``). ``Keeper.wait()`` blocks until those copies have landed; the
capture calls it before anything reads them (at the end of the ``with`` block, on
``cap[name]``, and before summing a second backward pass into a gradient).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..errors import CaptureError
from .host_copy import Streams, async_copier
from .pool import Pool
from .records import Label

Reducer = Callable[[str, str, str, Tensor], "Tensor | None"]
_AliasKey = tuple[int, int]  # (data_ptr, version): the memory a tensor shows, as it is now


@dataclass(frozen=True)
class Policy:
    """How a captured tensor is stored. See the module docstring for the defaults.

    Args:
        detach: store without the autograd graph.
        clone: store a copy rather than a reference.
        device: the device copies go to; None keeps each tensor's.
        dtype: the floating dtype floating tensors are cast to; None keeps theirs.
    """

    detach: bool = True
    clone: bool = True
    device: torch.device | None = None
    dtype: torch.dtype | None = None

    @classmethod
    def make(cls, *, detach: bool, clone: bool, device: torch.device | str | None, dtype: torch.dtype | None) -> Policy:
        """Validate user options into a policy, with one-line errors for bad values.

        Args:
            detach: store without the autograd graph.
            clone: store a copy rather than a reference.
            device: a torch device or its name (``"cpu"``, ``"cuda:0"``); None keeps each tensor's device.
            dtype: a floating torch dtype; None keeps each tensor's dtype.

        Returns:
            The validated ``Policy``.

        Raises:
            CaptureError: ``device`` is not a torch device, or ``dtype`` is not a floating dtype.
        """
        try:
            dev = None if device is None else torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise CaptureError(f"device={device!r} is not a torch device; pass e.g. 'cpu' or 'cuda:0'") from err
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise CaptureError(f"dtype={dtype!r} is not a floating torch dtype; pass e.g. torch.float16")
        return cls(detach=bool(detach), clone=bool(clone), device=dev, dtype=dtype)

    def apply(self, tensor: Tensor) -> Tensor:
        """The stored form of ``tensor``: a pure function of the tensor and the policy.

        Args:
            tensor: the tensor a hook saw.

        Returns:
            It detached, moved, cast and copied as the policy says (the tensor itself when nothing applies).
        """
        kept = tensor.detach() if self.detach else tensor
        dtype = self.dtype if self.dtype is not None and kept.is_floating_point() else None
        if self.device is not None or dtype is not None:
            return kept.to(device=self.device, dtype=dtype, copy=self.clone)
        return kept.clone() if self.clone else kept

    @property
    def to_host(self) -> bool:
        """The detached copies bound for the CPU, which may take the asynchronous path off an accelerator."""
        return self.detach and self.device is not None and self.device.type == "cpu"


class Keeper:
    """Applies a policy to every tensor of one capture, copying aliased tensors once."""

    def __init__(self, policy: Policy, reduce: Reducer | None = None, streams: Streams | None = None) -> None:
        self.policy = policy
        self.reduce = reduce
        self._fresh = replace(policy, clone=False)  # for what a reducer made anew
        self._async = async_copier(policy, streams)
        pooled = policy.detach and policy.clone and policy.device is None and policy.dtype is None
        self._pool = Pool() if pooled and self._async is None else None
        self._apply = self._pool.clone if self._pool is not None else _fast_apply(policy)
        self._take = self._apply if self._async is None else self._copy  # the copy (or reference) made, picked once
        self._seen: dict[_AliasKey, list[tuple[weakref.ref[Tensor], Tensor]]] = {}  # -> (source, its copy)
        self._references: list[tuple[Label, Tensor, int]] = []  # (label, tensor, version) when clone=False
        # what keep() does, picked once: it runs on every hooked call
        if reduce is not None:
            self.keep: Callable[[Tensor, Label], Tensor | None] = self._reduced
        elif not policy.clone:
            self.keep = self._reference
        else:
            self.keep = self._copied

    # keep(tensor, label) -> the stored form of ``tensor`` (None: the reducer kept nothing); label is (site, kind, key)
    def _reference(self, tensor: Tensor, label: Label) -> Tensor:
        kept = self._take(tensor)
        try:
            version = kept._version
        except RuntimeError:  # an inference tensor has no version counter (nor can it be changed in place later)
            return kept
        self._references.append((label, kept, version))
        return kept

    def _copied(self, tensor: Tensor, label: Label) -> Tensor:
        try:  # no storage (sparse, mkldnn) or no version counter (an inference tensor): copied every time
            key = (tensor.data_ptr(), tensor._version)
        except RuntimeError:
            return self._take(tensor)
        if not key[0]:  # meta and empty tensors all sit at address 0
            return self._take(tensor)
        seen = self._seen.get(key)
        if seen is None:  # the common call: memory not seen at this version
            kept = self._take(tensor)
            self._seen[key] = [(weakref.ref(tensor), kept)]
            return kept
        return self._aliased(seen, tensor, key[1])

    def _aliased(self, seen: list[tuple[weakref.ref[Tensor], Tensor]], tensor: Tensor, version: int) -> Tensor:
        """The copy of a tensor seen before at this address and version with the same view, if one is
        still alive and unchanged (an ``nn.Identity``'s output, ...); else a new copy, filed beside them."""
        seen[:] = [(ref, kept) for ref, kept in seen if ref() is not None]  # a freed source's address is reused
        for ref, kept in seen:
            source = ref()
            if source is not None and source._version == version and _same_view(source, tensor):
                return kept
        kept = self._take(tensor)
        seen.append((weakref.ref(tensor), kept))
        return kept

    def _copy(self, tensor: Tensor) -> Tensor:
        """The asynchronous copy where it applies, else the policy's (synchronous) one."""
        if self._async is not None and self._async.streams.accepts(tensor):
            return self._async.copy(tensor)
        return self._apply(tensor)

    def _reduced(self, tensor: Tensor, label: Label) -> Tensor | None:
        with torch.no_grad():
            out = self.reduce(*label, tensor.detach()) if self.reduce is not None else tensor
        if out is None:
            return None
        shared = out.layout == torch.strided and out.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
        return (self.policy if shared else self._fresh).apply(out)

    def wait(self) -> None:
        """Block until every asynchronous copy has landed (a no-op when there are none)."""
        if self._async is not None:
            self._async.wait()

    def modified_references(self) -> list[str]:
        """Labels of tensors stored by reference that an in-place op changed afterwards."""
        return [_format(label) for label, t, version in self._references if t._version != version]

    def forget(self, dropped: list[Tensor] | None = None) -> None:
        """Drop the alias table and references (the stored tensors themselves are not touched).

        ``dropped``: the copies the capture just let go; those nothing else holds take the next
        batch's copies (``hookscope.core.pool``). The list is emptied: its references would count.
        """
        self._seen.clear()
        self._references.clear()
        if self._pool is not None and dropped is not None:
            self._pool.release(dropped)

    def close(self) -> None:
        """Let the pooled copies go (the block ended)."""
        if self._pool is not None:
            self._pool.close()

    @property
    def pools(self) -> bool:
        """Whether the copies ``clear()`` drops can take later ones (``forget(dropped)`` wants them)."""
        return self._pool is not None and self._pool.large


def _fast_apply(policy: Policy) -> Callable[[Tensor], Tensor]:
    """``policy.apply`` without its per-call branches where no device or dtype is asked for (the hot path)."""
    if policy.device is not None or policy.dtype is not None:
        return policy.apply
    if policy.detach:
        return _detach_clone if policy.clone else _detached
    return Tensor.clone if policy.clone else _same


def _same_view(source: Tensor, tensor: Tensor) -> bool:
    """Two tensors at one address show the same values: the same shape, stride, dtype and device."""
    return (
        source.shape == tensor.shape
        and source.stride() == tensor.stride()
        and source.dtype == tensor.dtype
        and source.device == tensor.device
    )


def _detached(tensor: Tensor) -> Tensor:
    """The tensor without its graph: a tensor that has none (no grad needed) is kept as it is."""
    return tensor.detach() if tensor.requires_grad else tensor


def _detach_clone(tensor: Tensor) -> Tensor:
    return tensor.detach().clone() if tensor.requires_grad else tensor.clone()  # the same copy: no graph to drop


def _same(tensor: Tensor) -> Tensor:
    return tensor


def _format(label: Label) -> str:
    site, kind, key = label
    return f"{site!r} {kind} {key}"
