"""Memory for the next batch's copies: the copies ``clear()`` dropped that nothing else still holds.

A capture that clones every output, batch after batch, would ask the allocator for the same
large blocks again each batch; on the CPU those are fresh pages the kernel must fault in and
zero, which costs three times the copy itself (docs/benchmarks.md, "What is left"). When
``Capture.clear()`` drops a batch's copies, ``Pool.release`` keeps those that nobody outside
hookscope can still see, filed by (shape, stride, dtype); the next clone of a tensor with the
same key is a ``copy_`` into one of them instead of a new allocation.

A copy is reused only when it is certain that nothing else holds it or its memory: no other
Python reference to the tensor, no weak reference, no other tensor object over its memory (a
view, ``.data``, ``.numpy()``, a ``Parameter`` made from it), no C++ holder (autograd's saved
tensors, ``.grad`` of another tensor) and no reference to its storage object. Whatever fails
any of these checks is simply let go, as before. The pool holds at most what the last
``clear()`` dropped, and is emptied when the block ends (``Pool.close``).

Only CPU tensors of 64 KiB or more are pooled (GPU allocators already keep their blocks; small
blocks come back from the C heap), never under ``torch.inference_mode`` (a clone there is an
inference tensor), and only for detached copies (``detach=True, clone=True``, no ``dtype``).
"""

from __future__ import annotations

import sys
import weakref

import torch
from torch import Tensor

MIN_BYTES = 64 * 1024  # smaller copies come from the C heap's free lists anyway
_Key = tuple[torch.Size, tuple[int, ...], torch.dtype]


class Pool:
    """Free copies of the last batch, by (shape, stride, dtype); see the module docstring."""

    def __init__(self) -> None:
        self._free: dict[_Key, list[Tensor]] = {}
        self.large = False  # whether a copy of MIN_BYTES or more was made since the last release
        # what the counts say of a tensor nobody else holds (made here, held by nothing but the call)
        self._expected = _references([torch.empty(MIN_BYTES, dtype=torch.uint8)])[0]
        self._alone = _holders(torch.empty(MIN_BYTES, dtype=torch.uint8))

    def clone(self, tensor: Tensor) -> Tensor:
        """``tensor.detach().clone()``, into a free copy of the same shape, stride and dtype if there is one."""
        if self._free and tensor.device.type == "cpu":
            free = self._free.get((tensor.shape, tensor.stride(), tensor.dtype))
            if free and _plain(tensor) and not torch.is_inference_mode_enabled():
                target, self.large = free.pop(), True
                with torch.no_grad():
                    return target.copy_(tensor)
        copy = tensor.detach().clone() if tensor.requires_grad else tensor.clone()  # the same: no graph to drop
        if not self.large and copy.nbytes >= MIN_BYTES:
            self.large = True  # clear() has something to hand back (small copies alone: it skips the walk)
        return copy

    def release(self, dropped: list[Tensor]) -> None:
        """Keep, for the next batch, those of ``dropped`` (the copies ``clear()`` let go) that
        nothing outside hookscope holds; what the pool held before is let go. ``dropped`` is
        emptied first: its own references would count as holders."""
        self._free, self.large = {}, False
        large = {id(t): t for t in dropped if t.nbytes >= MIN_BYTES}  # the cheap test first: most are small
        candidates = [t for t in large.values() if _poolable(t)]
        del large
        dropped.clear()
        for tensor, count in zip(candidates, _references(candidates), strict=True):
            if count == self._expected and _holders(tensor) == self._alone and _spans(tensor):
                self._free.setdefault((tensor.shape, tensor.stride(), tensor.dtype), []).append(tensor)

    def close(self) -> None:
        """Let every pooled copy go (the block ended)."""
        self._free = {}

    def __len__(self) -> int:
        return sum(len(free) for free in self._free.values())


def _references(tensors: list[Tensor]) -> list[int]:
    """``sys.getrefcount`` of each tensor, always taken the same way (``Pool`` calibrates it once)."""
    return [sys.getrefcount(t) for t in tensors]


def _plain(tensor: Tensor) -> bool:
    """A tensor whose clone is a plain strided tensor of its own shape, stride and dtype."""
    return (
        type(tensor) is Tensor
        and tensor.layout == torch.strided
        and not tensor.is_quantized
        and not tensor.is_conj()
        and not tensor.is_neg()
    )


def _poolable(tensor: Tensor) -> bool:
    """A copy hookscope made that could take a later copy: large, on the CPU, its own memory."""
    return bool(
        type(tensor) is Tensor
        and tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and tensor.nbytes >= MIN_BYTES
        and not tensor.is_inference()
        and not tensor.requires_grad
        and tensor._base is None
        and tensor.storage_offset() == 0
        and _plain(tensor)
    )


def _holders(tensor: Tensor) -> tuple[int, int, int, int]:
    """Who holds ``tensor``'s impl and memory, counted the same way every time (``Pool`` calibrates it
    on a tensor nobody else holds): C++ holders of the impl (autograd's saved tensors, ``.grad`` of
    another tensor), weak references, references to the storage object, tensors over the storage."""
    storage = tensor.untyped_storage()
    uses = tensor._use_count()  # type: ignore[attr-defined]
    return uses, weakref.getweakrefcount(tensor), sys.getrefcount(storage), torch._C._storage_Use_Count(storage._cdata)


def _spans(tensor: Tensor) -> bool:
    """The tensor covers its whole storage (nothing hidden beyond it)."""
    return bool(tensor.untyped_storage().nbytes() == tensor.nbytes)
