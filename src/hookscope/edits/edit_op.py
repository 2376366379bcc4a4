"""One edit, ``EditOp``: a named change of a tensor at one kind, key and call, made out of place.

The helpers of ``hookscope.edits.ops`` build one each through ``make``, which checks what every
edit shares (the kind, the call, a generation's tokens); calling the op checks what it returned
(a new tensor of the same shape, the one it was given left as it was).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from ..core.inference import version
from ..core.kinds import TABLE, Kind, names
from ..errors import EditError
from .parts import Along
from .tokens import Tokens
from .values import Where

EditKind = Kind  # one of EDIT_KINDS, checked when an edit is made
# What an edit can change: what a module receives, what it returns, the gradient of what it returns.
EDIT_KINDS: tuple[str, ...] = tuple(k for k in names() if TABLE[k].point in ("pre", "forward", "output_grad"))
UserFunction = Callable[[Tensor, int], Tensor]


@dataclass(frozen=True, eq=False)
class EditOp:
    """One edit: ``change(tensor, where)`` returns the edited copy; ``zeroes`` marks a zero-ablation
    (a tensor that was already zero is left as it was, and that is no failure).

    Attributes:
        name: how the edit shows itself (``edits.zero(channels=[3])``).
        change: ``(tensor, where) -> tensor``: the edited copy of ``tensor`` at ``where`` (a ``Where``).
        kind: what is edited: ``output``, ``input`` or ``grad_output``.
        key: the tensor of a structured value; None when the value holds one.
        call: the one call edited; None edits every call.
        zeroes: a zero-ablation (a tensor already zero is no failure).
        tokens: the positions of a generation it edits (``positions="new"``...), read per call; a call
            with none of them is not edited (``hookscope.edits.tokens``).
    """

    name: str
    change: Callable[[Tensor, Where], Tensor]
    kind: EditKind = "output"
    key: str | None = None
    call: int | None = None
    zeroes: bool = False
    tokens: Tokens | None = None

    def __repr__(self) -> str:
        return f"edits.{self.name}"

    def __call__(self, tensor: Tensor, where: Where) -> Tensor:
        before = version(tensor)  # an inference tensor has none: only `edited is tensor` tells then
        edited = self.change(tensor, where)
        if not isinstance(edited, Tensor) or edited.shape != tensor.shape:
            got = tuple(edited.shape) if isinstance(edited, Tensor) else type(edited).__name__
            raise EditError(f"{self!r} at {where} returned {got}, expected a tensor of shape {tuple(tensor.shape)}")
        if version(tensor) != before or edited is tensor:
            raise EditError(
                f"{self!r} at {where} changed the tensor in place; return a new tensor (x * 0, not x.zero_())"
            )
        return edited


def make(
    name: str,
    change: Callable[[Tensor, Where], Tensor],
    kind: str,
    key: str | None,
    call: int | None,
    *,
    zeroes: bool = False,
    part: Along | Tokens | None = None,
) -> EditOp:
    """An ``EditOp``, once its kind, call and part agree (what every helper checks alike).

    Args:
        name: how the edit shows itself (``zero(channels=[3])``).
        change: ``(tensor, where) -> tensor``: the edited copy.
        kind: one of ``EDIT_KINDS``.
        key: the tensor of a structured value; None when the value holds one.
        call: the one call edited; None edits every call.
        zeroes: a zero-ablation (a tensor already zero is no failure).
        part: the part of the tensor the edit changes (a generation's ``Tokens`` are read per call).

    Returns:
        The ``EditOp``.

    Raises:
        EditError: an unknown ``kind``, a negative or non-int ``call``, a generation's tokens with
            ``call=`` or on a ``grad_output`` edit.
    """
    if kind not in EDIT_KINDS:
        raise EditError(f"an edit's kind is one of {', '.join(EDIT_KINDS)}, got {kind!r}")
    if call is not None and (not isinstance(call, int) or call < 0):
        raise EditError(f"call= is the index of one call (0, 1, ...) or None for every call, got {call!r}")
    tokens = part if isinstance(part, Tokens) else None
    if tokens is not None and call is not None:
        raise EditError(f"positions={tokens} reads every call of a generation; drop call={call}")
    if tokens is not None and kind == "grad_output":
        raise EditError(f"positions={tokens} reads a generation's calls in order, which backward reverses; "
                        "give integer positions to a grad_output edit")  # fmt: skip
    return EditOp(name, change, kind, key, call, zeroes, tokens)  # type: ignore[arg-type]
