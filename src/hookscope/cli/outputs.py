"""What the commands write, checked before any work, and the store's errors in the command line's words.

Every command that writes checks its output first, by the rule of the function that writes it at
the end (``write_report``, ``save``, ``extract``), so an output that exists without ``--force``
is refused before the model is loaded, not after minutes of work (``OutputExistsError``, as there):

``check_folder``  a report folder (``report``, ``report --from``, ``demo``): an existing non-empty one
``check_file``    a picture (``cam``): an existing file, or a folder in its place
``check_store``   a store (``capture``, ``extract``): an existing one, unless ``--resume`` continues it

``cli_flags(message)`` spells the API's keywords in an error or warning raised later (a full disk
during ``extract`` says "rerun with resume=True"; a model returning a dict says "pass
output="out['logits']"") as the flags: ``--resume``, ``--force``, ``--grads``, ``--output logits``.

``check_writable`` finds an output that cannot be written at all (a read-only place such as
``/proc``, a path under a file) before any work, with the reason.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

from ..errors import OptionError, OutputExistsError

FLAGS = {"force=True": "--force", "resume=True": "--resume", "grads=True": "--grads"}
# output="out['logits']", output='out[1]', output=KEY: the value as --output takes it (the first step without out)
OUTPUT_KEYWORD = re.compile(r"""(?<![\w-])output=(?:"([^"]*)"|'((?:[^'\\]|\\.)*)'|(\w+))""")


def check_writable(out: str | Path) -> None:
    """Refuse ``out`` when nothing can be written there: the deepest part of it that exists is a file (a path
    under a file), or a folder that takes no new file (read-only, not yours, or virtual such as ``/proc``)."""
    path = Path(os.path.abspath(out))
    existing = path if path.is_dir() else path.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise OptionError(f"cannot write {path}: {existing} is a file, not a folder; pick another --out")
    try:
        handle, probe = tempfile.mkstemp(dir=existing, prefix=".hookscope-probe-")
    except OSError as err:
        raise OptionError(f"cannot write {path}: {_why_not(existing, err)}; pick another --out") from err
    os.close(handle)
    os.remove(probe)


def _why_not(folder: Path, err: OSError) -> str:
    """Why ``folder`` takes no new file, in words (``/proc`` answers "No such file or directory")."""
    if err.errno == errno.EROFS:
        return f"{folder} is on a read-only filesystem"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"{folder} is not writable by you (permission denied)"
    return f"{folder} takes no new files (a virtual or read-only filesystem: {err.strerror})"


def check_folder(out: str, *, force: bool) -> None:
    """Refuse a report folder ``write_report`` would refuse: a file, or a non-empty folder without ``--force``."""
    path = Path(os.path.abspath(out))
    if path.exists() and not path.is_dir():
        raise OptionError(f"{path} is a file, not a folder; pick another --out")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise OutputExistsError(f"{path} already exists and is not empty; pass --force to replace it")
    check_writable(path)


def check_file(out: Path, *, force: bool) -> None:
    """Refuse to write the file ``out`` over a folder, or over a file without ``--force``."""
    if out.is_dir():
        raise OptionError(f"{str(out)!r} is a folder; pass --out with a file name such as cam.png")
    if out.exists() and not force:
        raise OutputExistsError(f"{str(out)!r} exists; pass --force to replace it")
    check_writable(out)


def check_store(out: str, *, force: bool, resume: bool | None = None) -> None:
    """Refuse a store that exists, unless ``--force`` replaces it or ``--resume`` continues it.

    ``resume`` is None for ``capture``, which cannot continue a store (nor write into an empty folder);
    ``extract`` may also fill an empty folder."""
    path = Path(out)
    check_writable(path)
    if force or resume or not path.exists():
        return
    if resume is None:
        raise OutputExistsError(f"{path} already exists; pass --force to replace it")
    if not (path.is_dir() and not any(path.iterdir())):
        raise OutputExistsError(f"{path} already exists; pass --resume to continue it or --force to replace it")


def cli_flags(message: str) -> str:
    """``message`` with the API's ``force=True`` / ``resume=True`` written as ``--force`` / ``--resume``."""
    message = re.sub(r"(--\w+) \(\w+=True\)", r"\1", message)  # "--force (force=True)": the flag is enough
    for keyword, flag in FLAGS.items():
        message = message.replace(keyword, flag)
    return OUTPUT_KEYWORD.sub(lambda found: f"--output {_flag_value(next(g for g in found.groups() if g))}", message)


def _flag_value(key: str) -> str:
    """``out['logits']`` -> ``logits``, ``out[1]`` -> ``1``, ``out.logits`` -> ``logits``; other keys as they are."""
    key = key.replace("\\'", "'")
    step = re.fullmatch(r"out(?:\[['\"]?([^\]'\"]+)['\"]?\]|\.(\w+))", key)
    return next(g for g in step.groups() if g) if step else key
