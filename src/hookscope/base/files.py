"""Files that are whole or absent: the one atomic write and the one staged folder.

``write_atomically(path, write)`` has ``write`` fill a hidden temporary file beside ``path``
(``.name.tmp``), flushes it to disk (``fsync``) and renames it into place with ``os.replace``: a
reader sees the old file or the new one, never half of one. Shards, manifests and the CLI's
images are written this way, and each gets the mode the umask gives a new file (``follow_umask``),
whatever its writer chose (``tempfile`` and safetensors create files 0600).

``staged_folder(target)`` yields a hidden folder next to ``target`` (same file system) to fill;
when the block ends without an error it is renamed to ``target`` (an existing ``target`` is set
aside first and removed after, or put back if the rename fails); on any error it is removed and
``target`` is left as it was. Saved stores, reports and a watch's first write are written this way.
A process killed meanwhile cannot remove its folder: the staging and set-aside folders carry the
writer's process id (``.name.tmp-p1234-1a2b3c4d``), and the next write to the same target removes
those of processes that are gone (``remove_stale``).

Durability: a rename is on disk only once its folder is (``sync_folder``, an ``fsync`` of the
folder), so every rename and every new folder that a store's promise depends on is followed by one.
"""

from __future__ import annotations

import contextlib
import errno
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
        sync_folder(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def staged_folder(
    target: Path, cannot: Callable[[OSError, Path], Exception], *, parents: bool = False
) -> Iterator[Path]:
    """A hidden folder to fill, moved to ``target`` when the block succeeds (see the module docstring).

    ``cannot(err, folder)`` is the error raised when the staging folder cannot be made in ``folder``
    or cannot be moved into place.
    """
    staging = target.parent / f".{target.name}{TEMPORARY}-{_owner()}"
    try:
        staging.mkdir(parents=parents)  # the umask decides its mode, as for any folder the user makes
    except OSError as err:
        raise cannot(err, staging.parent) from err
    remove_stale(target)
    try:
        yield staging
        _publish(staging, target)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise cannot(err, Path(err.filename or target.parent)) from err
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def remove_stale(target: Path) -> list[Path]:
    """Remove the staging and set-aside folders next to ``target`` left by processes that are gone (killed
    mid-write); return them. Those of a live process (another write in progress) are kept."""
    gone = []
    prefixes = (f".{target.name}{TEMPORARY}-", f".{target.name}.old-")
    try:
        found = [p for p in target.parent.iterdir() if p.name.startswith(prefixes)]
    except OSError:
        return []
    for path in found:
        pid = path.name.rsplit("-p", 1)[-1].split("-", 1)[0]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def sync_folder(path: Path) -> None:
    """Flush the folder ``path``'s entries (the names renames and new files gave it) to disk."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as err:  # some file systems cannot sync a folder; their renames are as durable as they get
        if err.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


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


def _owner() -> str:
    """``p1234-1a2b3c4d``: this process and a random tag, the tail of a staging folder's name."""
    return f"p{os.getpid()}-{secrets.token_hex(4)}"


def _publish(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``; an existing ``target`` is set aside first and removed after."""
    sync_folder(staging)
    old = target.with_name(f".{target.name}.old-{_owner()}") if target.exists() else None
    if old is not None:
        os.replace(target, old)
    try:
        os.replace(staging, target)
        sync_folder(target.parent)
    except BaseException:
        if old is not None and not target.exists():
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
