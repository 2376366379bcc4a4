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

The one output gate: every writer (``save``, ``extract``, ``watch(out=)``, the report pages, ``export``, each
command's ``--out``) calls ``new_output(out, force=..., kind=...)`` before it writes, and it decides alike for all:

- a path that does not exist, or an empty folder, is written without ``force``;
- ``force`` replaces only what hookscope wrote: a folder holding its marker ``.hookscope`` (``mark``: the kind,
  hookscope's version and the names the writer put there, written inside the staged folder, so it is whole or
  absent with the rest), a store (its ``manifest.json`` says ``"format": "hookscope.store"``) or a page written
  before the marker (a lone ``index.html`` that hookscope generated); any other file in the folder is named in
  the refusal, force or not. A single-file output (a picture, a JSON export) is the file the user named: ``force``
  replaces that file;
- it never replaces the current folder, a parent of it, the home folder, the filesystem root, or an input or a
  folder holding one (``inputs``: the paths the command reads);
- the refusal is one ``OutputExistsError`` line naming what would be deleted; it says "pass force=True" only
  where force would be allowed (the command line writes it ``--force``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .._version import __version__
from ..errors import OptionError, OutputExistsError

TEMPORARY = ".tmp"  # the suffix of a file being written; a killed writer leaves ``.name.tmp``
MARKER = ".hookscope"  # {"kind": "report", "hookscope": "1.0", "files": ["index.html"]}: what hookscope wrote here
_STORE = re.compile(r'\A\{\s*"format":\s*"hookscope\.store"')  # how a store's manifest.json begins
_PAGE = '<meta name="generator" content="hookscope '  # in the head of every page hookscope writes
SHOWN = 3  # the foreign files a refusal names before "and N more"


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


def new_output(
    out: str | os.PathLike[str],
    *,
    force: bool,
    kind: str,
    inputs: Iterable[str | os.PathLike[str]] = (),
    file: bool = False,
    resumable: bool = False,
) -> Path:
    """The one gate before any write (see the module docstring): ``out`` as an absolute path, or an
    ``OutputExistsError`` (an ``OptionError`` for a file where a folder goes, or the reverse).

    ``kind`` names the output in messages ("store", "report", "export", "picture"); ``inputs``: paths the
    writer reads, never replaced nor any folder holding one; ``file``: the output is one file, not a
    folder; ``resumable``: a store there may also be continued (``extract``'s ``resume=True``)."""
    path = Path(os.path.abspath(out))
    _refuse_protected(path, kind, inputs)
    if not os.path.lexists(path):
        return path
    if file:
        if path.is_dir():
            raise OptionError(f"{path} is a folder, not a file; pick a file name for the {kind}")
        if not force:
            raise OutputExistsError(f"{path} already exists; pass force=True to replace it, or pick another path")
        return path
    if not path.is_dir():
        raise OptionError(f"{path} is a file, not a folder; pick another folder for the {kind}")
    found, foreign = ours(path)
    if foreign:
        shown = ", ".join(foreign[:SHOWN]) + (f" and {len(foreign) - SHOWN} more" if len(foreign) > SHOWN else "")
        raise OutputExistsError(
            f"{path} already exists and holds {len(foreign)} file{'s' * (len(foreign) > 1)} hookscope did not "
            f"write ({shown}); hookscope replaces only its own outputs: pick a new folder, or move those out"
        )
    if found and not force:
        how = "resume=True to continue it or " if resumable and found == "store" else ""
        raise OutputExistsError(
            f"{path} already exists; pass {how}force=True to replace it (the hookscope {found} there), "
            "or pick another path"
        )
    return path


def ours(folder: Path) -> tuple[str, list[str]]:
    """The kind of hookscope output ``folder`` holds ("" for none, or an empty folder) and the entries in it
    hookscope did not write (a sub-folder's name ends in ``/``), sorted."""
    with os.scandir(folder) as found:
        entries = sorted(e.name + "/" * e.is_dir(follow_symlinks=False) for e in found)
    marker = _read_json(folder / MARKER)
    if isinstance(marker, dict) and isinstance(marker.get("kind"), str):
        own = {MARKER, *(str(name) for name in marker.get("files", []))}
        return marker["kind"], [e for e in entries if e.rstrip("/") not in own]
    if "manifest.json" in entries and _begins(folder / "manifest.json", _STORE):  # every store: all of it
        return "store", []
    if entries == ["index.html"] and _begins(folder / "index.html", re.compile(re.escape(_PAGE))):
        return "report", []  # a page written before the marker
    return "", entries


def mark(folder: Path, kind: str) -> None:
    """Write the marker into ``folder`` (a staged folder, filled): the ``kind`` of output, this version and
    the names ``folder`` holds, which a later ``force`` may replace."""
    names = sorted(p.name for p in folder.iterdir() if p.name != MARKER)
    text = json.dumps({"kind": kind, "hookscope": __version__, "files": names}) + "\n"
    write_atomically(folder / MARKER, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _refuse_protected(path: Path, kind: str, inputs: Iterable[str | os.PathLike[str]]) -> None:
    """Refuse, force or not, a place whose replacement would delete the user's work (the module docstring)."""
    why = _protected(Path(os.path.realpath(path)), inputs)
    if why:
        raise OutputExistsError(f"{path} is {why}, which hookscope never replaces; name a new {kind} path instead")


def _protected(real: Path, inputs: Iterable[str | os.PathLike[str]]) -> str:
    """Why replacing ``real`` (a resolved path) would destroy what is not hookscope's; "" when it would not."""
    here = Path(os.path.realpath(os.curdir))
    with contextlib.suppress(RuntimeError, KeyError):  # no home folder known
        if real == Path(os.path.realpath(Path.home())):
            return "the home folder"
    if real == Path(real.anchor):
        return "the filesystem root"
    if real == here:
        return "the current folder"
    if real in here.parents:
        return "a parent of the current folder"
    for given in inputs:
        spec = os.fspath(given)
        for candidate in {spec, spec.rsplit(":", 1)[0]}:  # "model.py:Net": the file before the colon
            read = Path(os.path.realpath(candidate)) if candidate and os.path.lexists(candidate) else None
            if read is not None and read == real:
                return f"the input {spec}"
            if read is not None and real in read.parents:
                return f"the folder holding the input {spec}"
    return ""


def _read_json(path: Path) -> object:
    """The JSON in the small file ``path``; None where it is missing, too big or not JSON."""
    try:
        if path.is_file() and path.stat().st_size < 1 << 20:
            return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    return None


def _begins(path: Path, pattern: re.Pattern[str]) -> bool:
    """Whether the first 4 KB of the file ``path`` match ``pattern`` (``search``)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as opened:
            return bool(pattern.search(opened.read(4096)))
    except OSError:
        return False


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


def move(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` on one file system (atomic: ``os.replace``), both folders' entries
    flushed to disk; the one rename outside a whole-or-absent write."""
    os.replace(source, target)
    sync_folder(target.parent)
    if source.parent != target.parent:
        sync_folder(source.parent)


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
