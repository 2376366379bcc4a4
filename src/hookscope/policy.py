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
is the next layer's input) are copied once and shared while the source is unchanged.

A ``reduce`` function ``(site, kind, key, tensor) -> tensor | None`` runs in the hook, on the
detached tensor, before anything is kept: a spatial mean, a slice, top-k channels, or running
statistics that keep nothing (return None). What it returns is copied only when it still shares
memory with the model's tensor (a slice, a view); ``device`` and ``dtype`` apply after it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .errors import CaptureError

Label = tuple[str, str, str]  # (site, kind, key)
Reducer = Callable[[str, str, str, Tensor], "Tensor | None"]
_AliasKey = tuple[int, torch.device, torch.dtype, torch.Size, tuple[int, ...], int]


@dataclass(frozen=True)
class Policy:
    """How a captured tensor is stored. See the module docstring for the defaults."""

    detach: bool = True
    clone: bool = True
    device: torch.device | None = None
    dtype: torch.dtype | None = None

    @classmethod
    def make(cls, *, detach: bool, clone: bool, device: torch.device | str | None, dtype: torch.dtype | None) -> Policy:
        """Validate user options into a policy, with one-line errors for bad values."""
        try:
            dev = None if device is None else torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise CaptureError(f"device={device!r} is not a torch device; pass e.g. 'cpu' or 'cuda:0'") from err
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise CaptureError(f"dtype={dtype!r} is not a floating torch dtype; pass e.g. torch.float16")
        return cls(detach=bool(detach), clone=bool(clone), device=dev, dtype=dtype)

    def apply(self, tensor: Tensor) -> Tensor:
        """The stored form of ``tensor``: a pure function of the tensor and the policy."""
        kept = tensor.detach() if self.detach else tensor
        dtype = self.dtype if self.dtype is not None and kept.is_floating_point() else None
        if self.device is not None or dtype is not None:
            return kept.to(device=self.device, dtype=dtype, copy=self.clone)
        return kept.clone() if self.clone else kept


class Keeper:
    """Applies a policy to every tensor of one capture, copying aliased tensors once."""

    def __init__(self, policy: Policy, reduce: Reducer | None = None) -> None:
        self.policy = policy
        self.reduce = reduce
        self._fresh = replace(policy, clone=False)  # for what a reducer made anew
        self._seen: dict[_AliasKey, tuple[weakref.ref[Tensor], Tensor]] = {}
        self._references: list[tuple[Label, Tensor, int]] = []  # (label, tensor, version) when clone=False

    def keep(self, tensor: Tensor, label: Label) -> Tensor | None:
        """The stored form of ``tensor`` (None: the reducer kept nothing); ``label`` is (site, kind, key)."""
        if self.reduce is not None:
            return self._reduced(tensor, label)
        if not self.policy.clone:
            kept = self.policy.apply(tensor)
            if not tensor.is_inference():
                self._references.append((label, kept, kept._version))
            return kept
        key = _alias_key(tensor)
        if key is not None:
            hit = self._seen.get(key)
            if hit is not None and hit[0]() is not None:
                return hit[1]
        kept = self.policy.apply(tensor)
        if key is not None:
            self._seen[key] = (weakref.ref(tensor), kept)
        return kept

    def _reduced(self, tensor: Tensor, label: Label) -> Tensor | None:
        with torch.no_grad():
            out = self.reduce(*label, tensor.detach()) if self.reduce is not None else tensor
        if out is None:
            return None
        shared = out.layout == torch.strided and out.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
        return (self.policy if shared else self._fresh).apply(out)

    def modified_references(self) -> list[str]:
        """Labels of tensors stored by reference that an in-place op changed afterwards."""
        return [_format(label) for label, t, version in self._references if t._version != version]

    def forget(self) -> None:
        """Drop the alias table and references (the stored tensors themselves are not touched)."""
        self._seen.clear()
        self._references.clear()


def _format(label: Label) -> str:
    site, kind, key = label
    return f"{site!r} {kind} {key}"


def _alias_key(tensor: Tensor) -> _AliasKey | None:
    """Same key and source still alive: same memory, same view, same version: same values."""
    if tensor.layout != torch.strided or tensor.is_inference() or tensor.is_meta:
        return None  # inference tensors have no version counter; we copy them every time
    return (
        tensor.data_ptr(),
        tensor.device,
        tensor.dtype,
        tensor.shape,
        tensor.stride(),
        tensor._version,
    )
