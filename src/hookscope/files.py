"""Files that are whole or absent: the one atomic write and the one staged folder.

``write_atomically(path, write)`` has ``write`` fill a hidden temporary file beside ``path``
(``.name.tmp``), flushes it to disk (``fsync``) and renames it into place with ``os.replace``: a
reader sees the old file or the new one, never half of one. Shards, manifests and the CLI's
images are written this way, and each gets the mode the umask gives a new file (``follow_umask``),
whatever its writer chose (``tempfile`` and safetensors create files 0600).

``staged_folder(target)`` yields a hidden folder next to ``target`` (same file system) to fill;
when the block ends without an error it is renamed to ``target`` (an existing ``target`` is set
aside first and removed after, or put back if the rename fails); on any error it is removed and
``target`` is left as it was. Saved stores and reports are written this way.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

TEMPORARY = ".tmp"  # the suffix of a file being written; a killed writer leaves ``.name.tmp``


def temporary(path: Path) -> Path:
    """The hidden name ``path`` is written under before it is renamed into place."""
    return path.with_name(f".{path.name}{TEMPORARY}")


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)``, fsync, rename to ``path``; the temporary file is removed on any error, which propagates."""
    tmp = temporary(path)
    try:
        write(tmp)
        follow_umask(tmp)
        sync(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def staged_folder(
    target: Path, cannot: Callable[[OSError, Path], Exception], *, parents: bool = False
) -> Iterator[Path]:
    """A hidden folder to fill, moved to ``target`` when the block succeeds (see the module docstring).

    ``cannot(err, folder)`` is the error raised when the staging folder cannot be made in ``folder``.
    """
    staging = target.parent / f".{target.name}{TEMPORARY}-{secrets.token_hex(4)}"
    try:
        staging.mkdir(parents=parents)  # the umask decides its mode, as for any folder the user makes
    except OSError as err:
        raise cannot(err, staging.parent) from err
    try:
        yield staging
        _publish(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def follow_umask(path: Path) -> None:
    """Give the file ``path`` the mode a new file gets from the umask (0644 under the usual 022)."""
    os.chmod(path, 0o666 & ~umask())


def umask() -> int:
    """The process's umask, read without changing it (Linux; read each time, as it may change); 0o022
    where it cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def sync(path: Path) -> None:
    """Flush ``path``'s data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``; an existing ``target`` is set aside first and removed after."""
    old = target.with_name(f".{target.name}.old-{secrets.token_hex(4)}") if target.exists() else None
    if old is not None:
        os.replace(target, old)
    try:
        os.replace(staging, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
