"""Warnings said once per call: a driver that runs the model several times (Score-CAM's masked
copies, integrated gradients' steps, a second pass) would otherwise repeat the same note."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def once_each(wrappers: int = 0) -> Iterator[None]:
    """Run the block, then issue each distinct warning it raised once, in order, at the code that
    called the public function running the block (``with once_each():`` in its body; ``wrappers``:
    the decorators between that function and its caller, e.g. ``hookscope.base.deprecation.renamed``).

    The caller's filters decide what happens to them, as if they had not been collected ("error"
    raises at the end of the block). When the block raises, its warnings are dropped: the
    exception says more."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield
    unique: dict[tuple[type[Warning], str], warnings.WarningMessage] = {}
    for w in seen:
        unique.setdefault((w.category, str(w.message)), w)
    for w in unique.values():
        # this generator, contextlib's __exit__, the public function, its wrappers, its caller
        warnings.warn(w.message, w.category, stacklevel=4 + wrappers)
