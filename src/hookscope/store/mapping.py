"""Several files mapped end to end into one range of addresses, read as one tensor.

Each shard file of a column is its own mapping, and separate mappings are separate tensors: a
minibatch whose items lie in two files takes a gather from each and a scatter of one into the
other's places. ``join`` reserves one range of addresses (nothing mapped in it yet, nothing counted
against memory) and maps each file into it in turn, each from a page boundary (``MAP_FIXED``), as a
private copy-on-write mapping like ``torch.UntypedStorage.from_file(shared=False)``'s: the files are
never changed. Their bytes are then one tensor, file ``k`` starting at ``starts(sizes)[k]``, and any
minibatch is one gather. The range is given back when nothing holds the tensor any more.

Linux and macOS (their ``mmap``, called through ``ctypes``); elsewhere ``AVAILABLE`` is False and a
reader keeps one mapping per file.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
import weakref
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

PAGE = mmap.PAGESIZE
AVAILABLE = sys.platform in ("linux", "darwin") and hasattr(mmap, "MAP_ANONYMOUS")
_FIXED = 0x10  # MAP_FIXED: the same number on Linux and macOS
_FAILED = ctypes.c_void_p(-1).value  # what mmap returns when it fails


def starts(sizes: Sequence[int]) -> list[int]:
    """Each file's first byte in the joined range: the sizes of the files before it, each rounded up to a page.

    Args:
        sizes: the files' sizes in bytes, in order.

    Returns:
        One offset per file, and the whole range's size after them.
    """
    found = [0]
    for size in sizes:
        found.append(found[-1] + -(-size // PAGE) * PAGE)
    return found


def join(paths: Sequence[Path], sizes: Sequence[int], dtype: torch.dtype) -> Tensor:
    """The files ``paths`` (of ``sizes`` bytes) end to end, as one 1-D ``dtype`` tensor of ``starts(sizes)[-1]`` bytes.

    Args:
        paths: the files, in order.
        sizes: their sizes in bytes, as the reader found them (a file of another size now is refused).
        dtype: the tensor's dtype (a page holds a whole number of its elements).

    Returns:
        A 1-D tensor over the range: file ``k``'s byte ``b`` is byte ``starts(sizes)[k] + b`` of it.

    Raises:
        OSError: a file is missing, of another size than ``sizes`` says, or cannot be mapped (its
            ``filename`` names it; the reserved range is given back), or the range cannot be reserved.
    """
    libc = _libc()
    offsets = starts(sizes)
    total = offsets[-1]
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
    base = libc.mmap(None, total, mmap.PROT_NONE if hasattr(mmap, "PROT_NONE") else 0, flags, -1, 0)
    if base in (None, _FAILED):
        raise OSError(ctypes.get_errno(), f"could not reserve {total} bytes of addresses")
    try:
        for path, at, size in zip(paths, offsets[:-1], sizes, strict=True):
            if size:
                _map(libc, base + at, Path(path), size)
    except OSError:
        libc.munmap(base, total)
        raise
    memory = (ctypes.c_char * total).from_address(base)
    weakref.finalize(memory, libc.munmap, base, total)  # once the tensor (which holds `memory`) is gone
    return torch.frombuffer(memory, dtype=dtype)


def _map(libc: ctypes.CDLL, address: int, path: Path, size: int) -> None:
    """Map ``size`` bytes of ``path`` at ``address`` (inside the reserved range), copy-on-write."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if os.fstat(fd).st_size != size:
            raise OSError(errno.EIO, f"{os.fstat(fd).st_size} bytes, {size} when the store was opened", str(path))
        prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | _FIXED
        if libc.mmap(address, size, prot, flags, fd, 0) != address:
            raise OSError(ctypes.get_errno(), "it could not be mapped", str(path))
    finally:
        os.close(fd)


def _libc() -> ctypes.CDLL:
    """The C library's ``mmap`` and ``munmap``, typed."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc
