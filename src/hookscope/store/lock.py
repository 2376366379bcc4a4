"""One writer per store: a lock file that names its holder.

``hold(root)`` creates ``root/.lock`` exclusively (``O_CREAT | O_EXCL``), holding the writer's
process id, host and start time as JSON, and ``release(root)`` removes it. While it is there, a
second ``extract`` into the store (a new run with ``force``, or ``resume=True``) is refused with a
``StoreError`` naming the holder (``process 1234 on host gpu-3, since ...``), so two runs never
extract the same batches or remove each other's files in progress. A lock whose process is gone
(killed, or a run on this host that ended without releasing it) is stale: the next writer takes
it over. A lock from another host is never taken over, as its process cannot be seen from here:
the message says to remove the file once that run is known to be over.

A process that holds a store's lock and writes it again (an ``extract`` that failed and is rerun
in the same notebook) takes its own lock over; two writers in one process at once are not told apart.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from ..base.files import alive, sync_folder
from ..errors import StoreError

LOCK = ".lock"  # inside the store


def hold(root: Path) -> None:
    """Take the lock of the store ``root`` (an existing folder), or raise naming the process that holds it."""
    path = root / LOCK
    for _ in range(3):  # a stale lock removed by another writer meanwhile: try again
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            _take_over_or_refuse(root, holder(root))
            continue
        except OSError as err:
            raise StoreError(f"cannot lock the store {root}: {err.strerror or err} ({path})") from err
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}, file)
        sync_folder(root)
        return
    raise StoreError(f"cannot lock the store {root}: other writers keep taking it; run one writer at a time")


def release(root: Path) -> None:
    """Remove the lock of ``root`` if this process holds it (nothing otherwise)."""
    found = holder(root)
    if found is not None and found.get("pid") == os.getpid() and found.get("host") == socket.gethostname():
        (root / LOCK).unlink(missing_ok=True)


def holder(root: Path) -> dict[str, object] | None:
    """What the lock file of ``root`` says (pid, host, since), ``{}`` for one that cannot be read, None for none."""
    try:
        found = json.loads((root / LOCK).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):
        return {}
    return found if isinstance(found, dict) else {}


def _take_over_or_refuse(root: Path, found: dict[str, object] | None) -> None:
    """Remove a stale lock (its process is gone, or it is this process's own); raise for a live one."""
    if found is None:
        return
    pid, host, since = found.get("pid"), found.get("host"), found.get("since")
    here = host == socket.gethostname() and isinstance(pid, int) and not isinstance(pid, bool)
    if here and isinstance(pid, int) and (pid == os.getpid() or not alive(pid)):
        (root / LOCK).unlink(missing_ok=True)
        return
    if not found:  # written by a writer killed mid-write, or not ours: it names no process to wait for
        when = (root / LOCK).stat().st_mtime if (root / LOCK).exists() else time.time()
        if time.time() - when > 60:
            (root / LOCK).unlink(missing_ok=True)
            return
    if not found:
        raise StoreError(f"the store {root} is being locked by another writer this moment; run one writer at a time")
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else "?"
    raise StoreError(
        f"the store {root} is being written by process {pid} on host {host} (since {started}); wait for it to "
        f"finish, or if that run is over (another machine's process cannot be checked from here), "
        f"remove {root / LOCK}"
    )
