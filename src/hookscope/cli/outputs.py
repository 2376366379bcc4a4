"""What the commands write, checked before any work, and the store's errors in the command line's words.

Every command that writes checks its output first, through the one gate the function that writes it
at the end calls (``base.files.new_output``), so an output that exists without ``--force``, one holding
files hookscope did not write, or the folder holding an input, is refused before the model is loaded,
not after minutes of work (``OutputExistsError``, as there):

``check_folder``  a report folder (``report``, ``report --from``, ``demo``)
``check_file``    a picture (``cam``): an existing file, or a folder in its place
``check_store``   a store (``capture``, ``extract``), unless ``--resume`` continues the one there

``cli_flags(message)`` spells the API's keywords in an error or warning raised later (a full disk
during ``extract`` says "rerun with resume=True"; a model returning a dict says "pass
output="out['logits']"") as the flags: ``--resume``, ``--force``, ``--grads``, ``--output logits``.

``check_writable`` finds an output that cannot be written at all (a read-only place such as
``/proc``, a path under a file) before any work, with the reason.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..base.files import new_output
from ..errors import OptionError

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


def check_folder(out: str, *, force: bool, inputs: Sequence[str | None] = ()) -> None:
    """Refuse a report folder ``write_report`` would refuse (``base.files.new_output``), or one not writable."""
    check_writable(new_output(out, force=force, kind="report", inputs=given(inputs)))


def check_file(out: Path, *, force: bool, inputs: Sequence[str | None] = ()) -> None:
    """Refuse to write the file ``out`` over a folder, over an input, or over a file without ``--force``."""
    check_writable(new_output(out, force=force, kind="picture", inputs=given(inputs), file=True))


def check_store(out: str, *, force: bool, resume: bool | None = None, inputs: Sequence[str | None] = ()) -> None:
    """Refuse a store ``save`` or ``extract`` would refuse, unless ``--resume`` continues the store there
    (``resume`` is None for ``capture``, which cannot continue one)."""
    from ..store.format import MANIFEST  # here: the store's modules import torch, and --help imports this module

    path = Path(out)
    check_writable(path)
    if not (resume and (path / MANIFEST).is_file()):
        new_output(path, force=force, kind="store", inputs=given(inputs), resumable=resume is not None)


def given(specs: Sequence[str | None]) -> list[str]:
    """The paths a command reads (model, weights, inputs, stores), each spec as typed: ``new_output`` ignores
    those that are no file (``resnet18``, ``randn:1,3,32,32``)."""
    return [spec for spec in specs if spec]


def read_by(args: argparse.Namespace) -> list[str | None]:
    """What a command reads: its model, weights, inputs, image and stores (those it has)."""
    names = ("model", "weights", "image", "store", "against")
    return [*(getattr(args, name, None) for name in names), *(getattr(args, "inputs", None) or [])]


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
