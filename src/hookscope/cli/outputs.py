"""What the commands write, checked before any work, and the store's errors in the command line's words.

Every command that writes checks its output first, by the rule of the function that writes it at
the end (``write_report``, ``save``, ``extract``), so an output that exists without ``--force``
is refused before the model is loaded, not after minutes of work (``OutputExistsError``, as there):

``check_folder``  a report folder (``report``, ``report --from``, ``demo``): an existing non-empty one
``check_file``    a picture (``cam``): an existing file, or a folder in its place
``check_store``   a store (``capture``, ``extract``): an existing one, unless ``--resume`` continues it

``cli_flags(message)`` spells the API's keywords in a ``StoreError`` raised later (a full disk
during ``extract`` says "rerun with resume=True") as the flags: ``--resume``, ``--force``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import OptionError, OutputExistsError

FLAGS = {"force=True": "--force", "resume=True": "--resume"}


def check_folder(out: str, *, force: bool) -> None:
    """Refuse a report folder ``write_report`` would refuse: a file, or a non-empty folder without ``--force``."""
    path = Path(os.path.abspath(out))
    if path.exists() and not path.is_dir():
        raise OptionError(f"{path} is a file, not a folder; pick another --out")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise OutputExistsError(f"{path} already exists and is not empty; pass --force to replace it")


def check_file(out: Path, *, force: bool) -> None:
    """Refuse to write the file ``out`` over a folder, or over a file without ``--force``."""
    if out.is_dir():
        raise OptionError(f"{str(out)!r} is a folder; pass --out with a file name such as cam.png")
    if out.exists() and not force:
        raise OutputExistsError(f"{str(out)!r} exists; pass --force to replace it")


def check_store(out: str, *, force: bool, resume: bool | None = None) -> None:
    """Refuse a store that exists, unless ``--force`` replaces it or ``--resume`` continues it.

    ``resume`` is None for ``capture``, which cannot continue a store (nor write into an empty folder);
    ``extract`` may also fill an empty folder."""
    path = Path(out)
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
    return message
