"""The edits of ``hookscope.edit``: ``from hookscope import edits``; ``edits.zero(channels=[3, 17])``.

A forwarding name: the helpers live in ``hookscope.edit.ops`` (which says what each does), and
this module gives them the short public name, so ``from hookscope import edits`` and
``from hookscope.edits import zero`` both work.
"""

from __future__ import annotations

from .edit.ops import EDIT_KINDS, EditOp, add, clamp, function, mean, replace, scale, zero
from .edit.values import Where

__all__ = ["EDIT_KINDS", "EditOp", "Where", "add", "clamp", "function", "mean", "replace", "scale", "zero"]
