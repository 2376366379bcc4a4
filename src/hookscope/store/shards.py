"""The shards of a store: safetensors files written atomically, tensors memory-mapped back, statistics tables.

A shard is a standard ``.safetensors`` file (``safetensors.safe_open`` reads it) whose header
metadata holds, under ``"hookscope"``, what its tensors are (site, kind, key, batch, call): a
shard describes itself, so a store whose manifest was never completed (a killed run) can be
indexed from its shards' headers alone. Every shard is written whole or not at all
(``hookscope.base.files.write_atomically``: a temporary name, fsync, rename).

Reading needs torch only: a shard is memory-mapped (``torch.UntypedStorage.from_file``, a
private copy-on-write mapping: the file is never changed) and each tensor is a view into it,
so nothing is read until it is used, and a slice reads only its pages. Nothing is unpickled:
the header is JSON, dtypes come from a fixed table, file names must stay inside the store.

Damage: every tensor's bytes have a CRC-32 in the shard's metadata (``"crc32"``), checked the
first time the tensor is read (``MappedShards(root, verify=True)``); a shard that is truncated,
missing, or whose header or bytes do not match raises ``DamagedShardError`` naming it, and the
rest of the store reads as before.

A statistics table (``RunningStats`` by (site, kind, key)) is a shard too: its tensors are the
statistics' own, its metadata lists the labels (``write_stats``, ``read_table``).
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, cast

import torch
from torch import Tensor

from ..base.files import write_atomically
from ..base.optional import require
from ..core.records import Label
from ..errors import DamagedShardError, StoreError
from ..stats.streaming import RunningStats, merge_tables
from .header import check_shard, index_checksum

_NAMES = (
    "float64 float32 float16 bfloat16 int64 int32 int16 int8 uint8 bool float8_e4m3fn float8_e5m2 uint16 uint32 uint64"
)
DTYPES: dict[str, torch.dtype] = {
    name: dtype for name in _NAMES.split() if isinstance(dtype := getattr(torch, name, None), torch.dtype)
}
META_KEY = "hookscope"


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float16`` -> ``"float16"``, for the dtypes a store can hold."""
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise StoreError(f"a store cannot hold {dtype} tensors; it holds {', '.join(DTYPES)}")
    return name


def write_shard(path: Path, tensors: Mapping[str, Tensor], meta: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``tensors`` to the shard ``path`` atomically; return its index (``read_index``'s form)."""
    save_file = require("safetensors.torch").save_file
    owned = _owning(tensors)
    sums = {name: checksum(t.untyped_storage(), int(t.storage_offset()) * t.element_size(), t.nbytes)
            for name, t in owned.items()}  # fmt: skip
    described = json.loads(json.dumps({**meta, "crc32": sums}))  # as a reader will see it
    shapes = {name: (dtype_name(t.dtype), list(t.shape), None) for name, t in owned.items()}
    described["index_crc32"] = index_checksum(shapes, described)

    def write(tmp: Path) -> None:  # write_atomically gives it the umask's mode (safetensors makes it 0600)
        save_file(owned, str(tmp), metadata={META_KEY: json.dumps(described)})

    try:
        write_atomically(path, write)
    except Exception as err:
        raise StoreError(f"cannot write {path}: {one_line(err)}") from err
    return read_index(path)


def read_index(path: Path) -> dict[str, Any]:
    """A shard's header: ``{"bytes", "data_start", "meta", "tensors": {name: (dtype, shape, [begin, end])}}``.

    Raises ``DamagedShardError`` for a file that is missing, a link, truncated, or whose header is not
    one (every field is checked: ``hookscope.store.schema``).
    """
    try:
        refuse_link(path, str(path))
        size = path.stat().st_size
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > min(size - 8, 1 << 30):
                raise ValueError(f"not a safetensors file: a header of {length} bytes in a file of {size}")
            raw = f.read(length)
    except FileNotFoundError as err:
        raise DamagedShardError(str(path), "missing") from err
    except (OSError, ValueError, struct.error) as err:
        raise DamagedShardError(str(path), one_line(err)) from err
    return check_shard(raw, size, str(path))


def inside(root: Path, relative: str) -> Path:
    """``root / relative``, refusing names that would leave the store (absolute, ``..``) and links in it."""
    parts = PurePosixPath(relative).parts
    if not parts or PurePosixPath(relative).is_absolute() or ".." in parts:
        raise StoreError(f"{root} names a file outside the store ({relative!r}); it is not a valid store")
    path = root
    for part in parts:
        path = path / part
        refuse_link(path, relative)
    return path


def refuse_link(path: Path, name: str) -> None:
    """A ``DamagedShardError`` for a symbolic link: a store holds plain files, and a link is never followed
    (it could lead anywhere outside the store)."""
    if path.is_symlink():
        raise DamagedShardError(name, "it is a symbolic link, which a store never holds; it was not followed "
                                "(copy the file itself into the store)")  # fmt: skip


class MappedShards:
    """The shards of one store, memory-mapped on first use; tensors are views into them.

    ``verify``: check a tensor's CRC-32 (when its shard has one) as it is mapped, reading its bytes once.
    """

    def __init__(self, root: Path, *, verify: bool = True) -> None:
        self.root, self.verify = root, verify
        self._storages: dict[str, torch.UntypedStorage] = {}

    def tensor(
        self, file: str, data_start: int, dtype: str, shape: list[int], offsets: list[int], crc32: int = -1
    ) -> Tensor:
        """The tensor at ``offsets`` of ``file``: a view of the mapped file, or a copy when misaligned."""
        kind = DTYPES.get(dtype)
        if kind is None:
            raise StoreError(f"{file} holds a tensor of dtype {dtype!r}, which hookscope does not read")
        begin, end = data_start + offsets[0], data_start + offsets[1]
        itemsize = torch.empty((), dtype=kind).element_size()
        if end - begin != math.prod(shape) * itemsize:
            raise StoreError(f"{file}: a tensor of shape {shape} {dtype} does not fit bytes {begin}..{end}")
        if begin == end:
            return torch.empty(shape, dtype=kind)
        storage = self._storage(file, end)
        if self.verify and crc32 >= 0 and checksum(storage, begin, end - begin) != crc32:
            raise DamagedShardError(file, f"bytes {begin}..{end} fail their checksum")
        if begin % itemsize:  # safetensors aligns its data; a file from elsewhere may not be
            raw = torch.empty(0, dtype=torch.uint8).set_(storage, begin, (end - begin,), (1,))
            return raw.clone().view(kind).reshape(shape)
        return torch.empty(0, dtype=kind).set_(storage, begin // itemsize, shape, _strides(shape))

    def whole(self, file: str, dtype: str) -> Tensor:
        """Every whole element of ``file`` (header too), as one 1-D ``dtype`` view of its mapping.

        Raises:
            DamagedShardError: the file is missing, empty or cannot be mapped.
        """
        kind = DTYPES[dtype]
        storage = self._storage(file, 0)
        count = storage.nbytes() // torch.empty((), dtype=kind).element_size()
        return torch.empty(0, dtype=kind).set_(storage, 0, (count,), (1,))

    def _storage(self, file: str, needed: int) -> torch.UntypedStorage:
        if file not in self._storages:
            path = inside(self.root, file)
            try:
                size = path.stat().st_size if path.is_file() else -1
                if size <= 0:
                    raise DamagedShardError(file, "missing" if size < 0 else "empty")
                mapped = torch.UntypedStorage.from_file(str(path), shared=False, nbytes=size)
            except (OSError, RuntimeError) as err:  # unreadable (permissions), or mmap refused
                raise DamagedShardError(file, f"it cannot be read: {one_line(err)}") from err
            self._storages[file] = cast(torch.UntypedStorage, mapped)
        storage = self._storages[file]
        if storage.nbytes() < needed:
            raise DamagedShardError(file, f"truncated ({storage.nbytes()} bytes, {needed} needed)")
        return storage


# -- statistics tables ----------------------------------------------------------------------
def write_stats(path: Path, table: Mapping[Label, RunningStats], meta: Mapping[str, Any]) -> None:
    """Write a statistics table (one safetensors file, labels in its metadata) atomically."""
    tensors: dict[str, Tensor] = {}
    labels = []
    for i, ((site, kind, key), stats) in enumerate(table.items()):
        tensors.update({f"s{i}.{name}": t for name, t in stats.to_tensors().items()})
        labels.append({
            "site": site, "kind": kind, "key": key, "prefix": f"s{i}", "channel_dim": stats.channel_dim,
            "shape": list(stats.shape or ()), "dtype": stats.dtype,
        })  # fmt: skip
    write_shard(path, tensors, {**meta, "labels": labels})


def read_table(mapped: MappedShards, relative: str) -> dict[Label, RunningStats]:
    """The statistics table of the file ``relative`` (inside the store), as ``write_stats`` wrote it."""
    index = read_index(inside(mapped.root, relative))
    sums = index["meta"].get("crc32", {})
    table = {}
    for label in index["meta"].get("labels", []):  # each names its tensors' prefix (checked by schema)
        prefix = label["prefix"] + "."
        named = {}
        for name in (n for n in index["tensors"] if n.startswith(prefix)):
            dtype, shape, offsets = index["tensors"][name]
            crc = sums.get(name, -1)
            named[name.removeprefix(prefix)] = mapped.tensor(relative, index["data_start"], dtype, shape, offsets, crc)
        try:
            stats = RunningStats.from_tensors(named, channel_dim=label["channel_dim"])
        except (IndexError, RuntimeError, ValueError) as err:
            raise DamagedShardError(relative, f"the statistics of {label['site']} do not fit: {one_line(err)}") from err
        stats.shape, stats.dtype = tuple(label["shape"]), label["dtype"]
        table[(label["site"], label["kind"], label["key"])] = stats
    return table


def checksum(storage: torch.UntypedStorage, begin: int, nbytes: int) -> int:
    """The CRC-32 of ``nbytes`` bytes of ``storage`` (CPU) from byte ``begin``, read in place."""
    if not nbytes:
        return 0
    raw = torch.empty(0, dtype=torch.uint8).set_(storage, begin, (nbytes,), (1,))
    return zlib.crc32(raw.numpy().data)


def _strides(shape: list[int]) -> list[int]:
    """Row-major (contiguous) strides of ``shape``, in elements."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(shape[i + 1], 1)
    return strides


def _owning(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Contiguous CPU tensors that each own their memory, as safetensors requires."""
    owned: dict[str, Tensor] = {}
    seen: set[int] = set()
    for name, tensor in tensors.items():
        t = tensor.detach().cpu()
        whole = t.is_contiguous() and t.untyped_storage().nbytes() == t.nbytes
        if not whole or t.untyped_storage().data_ptr() in seen:
            t = t.contiguous().clone()
        seen.add(t.untyped_storage().data_ptr())
        owned[name] = t
    return owned


def one_line(err: BaseException) -> str:
    """An error as one line: an OSError's reason and file, anything else's message."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror + (f" ({err.filename})" if err.filename else "")
    return " ".join(str(err).split()) or type(err).__name__


def read_stats(mapped: MappedShards, section: Mapping[str, Any]) -> dict[Label, RunningStats]:
    """The merged table of a store's ``stats`` section (one file, or the parts of an interrupted run)."""
    files = section["parts"] if "parts" in section else [section["file"]]
    tables = [read_table(mapped, f) for f in files]
    try:
        return merge_tables(tables)
    except (RuntimeError, ValueError) as err:  # parts whose shapes differ: one was written over
        raise StoreError(
            f"{mapped.root}: the statistics parts {', '.join(files)} do not merge ({one_line(err)}); "
            "remove the damaged part and resume the run"
        ) from err
