"""``export(source, out, *, format, force=False, ...)``: one entry point, one writer per format.

``FORMATS`` maps a format's name to its writer, a function ``(source, out, *, force, **its options)``
returning the path written; ``OPTIONS`` names the options each writer takes. ``export`` lists every
option in its own signature, keyword-only; one that the chosen format does not take, given a value
other than its default, is an ``OptionError`` naming the options the format takes.
A format's module owns its options and its checks of ``source``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..base.deprecation import renamed
from ..base.words import closest
from ..core.select import Selector
from ..errors import OptionError
from ..progress import Progress
from ..store.format import SHARD_SIZE
from . import model_explorer
from . import sae_lens as datasets

Writer = Callable[..., Path]

FORMATS: dict[str, Writer] = {
    "datasets": datasets.write,  # a store as an HF datasets folder in SAE Lens's layout (exports/sae_lens.py)
    "model-explorer": model_explorer.write,  # node data for Google's Model Explorer, keyed by torch.export node ids
}
OPTIONS: dict[str, tuple[str, ...]] = {
    "datasets": ("select", "kind", "key", "shard_size", "progress"),
    "model-explorer": ("graph", "model", "x", "column"),
}


@renamed(measure="column")  # measure= is compare.cka's CKA or RSA
def export(
    source: Any,
    out: str | os.PathLike[str],
    *,
    format: str,
    force: bool = False,
    select: Selector | None = None,
    kind: str = "output",
    key: str | None = None,
    shard_size: int | str = SHARD_SIZE,
    progress: Progress = None,
    graph: Any = None,
    model: Any = None,
    x: Any = None,
    column: str | None = None,
) -> Path:
    """Write ``source`` to ``out`` in ``format`` (one of ``FORMATS``); returns the path written.

    Every format's options are keyword-only parameters here; one the chosen format does not take, given
    a value other than its default, is an ``OptionError``.

    Args:
        source: what is exported: a store (a path or a ``Run``) for ``datasets``; a store, a watch
            run or a graph for ``model-explorer``.
        out: the file or folder written.
        format: ``datasets`` (an HF datasets folder in SAE Lens's layout) or ``model-explorer``
            (node data for Google's Model Explorer).
        force: replace an existing ``out`` that hookscope wrote (never a folder holding other files).
        select: ``datasets``: the sites (names or globs); None: every site.
        kind: ``datasets``: the kind of each site written (default ``output``).
        key: ``datasets``: the tensor of each call; None: the site's first key.
        shard_size: ``datasets``: the bytes of each ``.arrow`` file (an int or ``"256MB"``; default
            ``store.format.SHARD_SIZE``, as a store's shards).
        progress: ``datasets``: ``hookscope.progress``; default quiet; hears ``("export", batches done,
            batches)``.
        graph: ``model-explorer``: a ``Graph`` built with ``exported=True`` (a ``Graph`` source is its own).
        model: ``model-explorer``: with ``x``, builds the graph when none is given.
        x: ``model-explorer``: the input ``model`` is exported on.
        column: ``model-explorer``: the number drawn (a Summary field, a History column; default per
            source); ``measure=`` is its old spelling.

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
    given = {"select": select, "kind": kind, "key": key, "shard_size": shard_size, "progress": progress,
             "graph": graph, "model": model, "x": x, "column": column}  # fmt: skip
    defaults = {"kind": "output", "shard_size": SHARD_SIZE}
    stray = [
        name for name, value in given.items()
        if name not in OPTIONS[format] and (value is not None if name not in defaults else value != defaults[name])
    ]  # fmt: skip
    if stray:
        raise OptionError(f"format={format!r} takes {', '.join(f'{o}=' for o in OPTIONS[format])}; got "
                          f"{', '.join(f'{o}=' for o in stray)}")  # fmt: skip
    return writer(source, out, force=force, **{name: given[name] for name in OPTIONS[format]})
