"""``export(source, out, *, format, force=False, **options)``: one entry point, one writer per format.

``FORMATS`` maps a format's name to its writer, a function ``(source, out, *, force, **options)``
returning the path written. A format's module owns its options and its checks of ``source``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..base.words import closest
from ..errors import OptionError
from . import model_explorer
from . import sae_lens as datasets

Writer = Callable[..., Path]

FORMATS: dict[str, Writer] = {
    "datasets": datasets.write,  # a store as an HF datasets folder in SAE Lens's layout (exports/datasets.py)
    "model-explorer": model_explorer.write,  # node data for Google's Model Explorer, keyed by torch.export node ids
}


def export(source: Any, out: str | os.PathLike[str], *, format: str, force: bool = False, **options: Any) -> Path:
    """Write ``source`` to ``out`` in ``format`` (one of ``FORMATS``); returns the path written.

    Args:
        source: what is exported: a store (a path or a ``Run``) for ``datasets``; a store, a watch
            run or a graph for ``model-explorer``.
        out: the file or folder written.
        format: ``datasets`` (an HF datasets folder in SAE Lens's layout) or ``model-explorer``
            (node data for Google's Model Explorer).
        force: replace an existing ``out`` that hookscope wrote (never a folder holding other files).
        **options: the format's own options (``select=``, ``kind=``, ``key=``, ``shard_size=`` for
            ``datasets``; ``graph=``, ``model=``, ``x=``, ``measure=`` for ``model-explorer``).

    Returns:
        The path written.

    Raises:
        OptionError: an unknown format, an option the format does not take, or a file where a folder
            goes (or the reverse).
        OutputExistsError: ``out`` exists and ``force`` is False, or it holds files hookscope did not write.
    """
    writer = FORMATS.get(format)
    if writer is None:
        raise OptionError(f"format={format!r} is not a format hookscope exports to{closest(format, FORMATS)}; "
                          f"pass one of {sorted(FORMATS)}")  # fmt: skip
    return writer(source, out, force=force, **options)
