"""Edits: change what a layer produces, receives or gets back, patch between runs, and prove each edit took effect.

The helpers that say what an edit does are this package's public names:
``from hookscope import edits``; ``hookscope.edit(model, {"layer4": edits.zero(channels=[3, 17])})``.
Beside them: ``hookscope.edits.edit`` (the ``edit`` block), ``.patching`` (``patch_sweep``),
``.effects`` (``PatchSweep``), ``.ops`` (each helper, with what it does), ``.edit_op`` (``EditOp``, one
edit), ``.parts`` (channels, units, positions), ``.values``, ``.tally`` and ``.tokens``
(``positions="new"``: the tokens of a generation).
"""

from __future__ import annotations

from .edit_op import EDIT_KINDS, EditOp
from .ops import add, clamp, function, mean, project_out, replace, scale, zero
from .values import Where

__all__ = [
    "EDIT_KINDS", "EditOp", "Where", "add", "clamp", "function", "mean", "project_out", "replace", "scale", "zero",
]  # fmt: skip
