"""The one table of kinds: what a capture can take at a site, where it comes from, how it is keyed.

=============  ===========  ========================  ========  =============================================
kind           point        keys                      gradient  what
=============  ===========  ========================  ========  =============================================
input          pre          ``args[0]``, ``kwargs.m``  no        what the module received (forward pre-hook)
output         forward      ``out``, ``out[0]``        no        what it returned (forward hook)
grad_input     input_grad   as ``input``              yes       d loss / d each input tensor
grad_output    output_grad  as ``output``             yes       d loss / d each output tensor
param_grad     param        ``weight``, ``0.bias``    yes       ``param.grad`` after each backward pass
=============  ===========  ========================  ========  =============================================

Everything in hookscope that deals in kinds reads this table and keeps no list of its own: the
capture engine installs its hooks by each kind's ``point``; ``extract`` takes the kinds that
are not gradients (they exist under ``torch.no_grad()``); ``gradient_flow`` and the statistics
take the gradients; the CLI's ``--kinds`` choices are the table's names; a store files a kind
per call or, for ``param``, per site; the report draws a gradient with a diverging colormap.

A new kind at an existing point is one row here (a test adds one and meets it in the CLI and in
a store). A new point is a row here plus its handler in ``capture.py`` (and, if torch needs a
new hook function, a method of ``hooks.HandleGroup``); a second per-site kind would also need
its own field on ``Record`` beside ``param_grads``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, cast

from ..base.words import closest

Point = Literal["pre", "forward", "input_grad", "output_grad", "param"]

# The built-in rows, for type checkers; tests check that it names exactly the table's rows.
Kind = Literal["input", "output", "grad_input", "grad_output", "param_grad"]


@dataclass(frozen=True)
class KindInfo:
    """One row of the table."""

    name: str
    point: Point  # where the capture takes it
    keys: str  # how its tensors are keyed, in words
    gradient: bool  # exists only when a backward pass runs
    what: str

    @property
    def per_call(self) -> bool:
        """Held by each ``Call`` (every point but ``param``, which is held per site)."""
        return self.point != "param"


TABLE: dict[str, KindInfo] = {
    row.name: row
    for row in (
        KindInfo("input", "pre", "args[i], kwargs.name", False, "what the module received"),
        KindInfo("output", "forward", "out, out[i], out.name", False, "what the module returned"),
        KindInfo("grad_input", "input_grad", "as input", True, "d loss / d each input tensor"),
        KindInfo("grad_output", "output_grad", "as output", True, "d loss / d each output tensor"),
        KindInfo("param_grad", "param", "parameter names", True, "param.grad after each backward pass"),
    )
}

KINDS = cast("tuple[Kind, ...]", tuple(TABLE))  # the built-in kinds, in table order (hookscope.KINDS)


def names() -> tuple[Kind, ...]:
    """Every kind of the table, in table order (rows added at run time included)."""
    return cast("tuple[Kind, ...]", tuple(TABLE))


def forward_kinds() -> tuple[Kind, ...]:
    """The kinds that are not gradients: what a pass under ``torch.no_grad()`` can capture."""
    return tuple(k for k in names() if not TABLE[k].gradient)


def gradient_kinds() -> tuple[Kind, ...]:
    """The kinds that a backward pass delivers."""
    return tuple(k for k in names() if TABLE[k].gradient)


def at(point: Point, kinds: Iterable[str]) -> tuple[Kind, ...]:
    """Those of ``kinds`` taken at ``point``, in table order."""
    chosen = set(kinds)
    return tuple(k for k in names() if k in chosen and TABLE[k].point == point)


def is_gradient(kind: str) -> bool:
    """Whether ``kind`` is a gradient (False for a kind the table does not know)."""
    row = TABLE.get(kind)
    return row is not None and row.gradient


def per_call(kind: str) -> bool:
    """Whether ``kind`` is held per call (True for a kind the table does not know)."""
    row = TABLE.get(kind)
    return row is None or row.per_call


def order(kind: str) -> int:
    """A kind's place in the table, for sorting (unknown kinds last)."""
    return names().index(cast("Kind", kind)) if kind in TABLE else len(TABLE)


def choose(kinds: str | Iterable[str], among: tuple[Kind, ...]) -> tuple[tuple[Kind, ...], list[str]]:
    """``kinds`` (one name or several) as a tuple in table order, and those not ``among`` the allowed ones.

    A caller raises its own error when the second list is not empty or the first is.
    """
    asked = [kinds] if isinstance(kinds, str) else list(kinds)
    wrong = [k for k in asked if k not in among]
    return tuple(k for k in among if k in asked), wrong


def misspelled(wrong: Iterable[object]) -> str:
    """``"; closest: 'output'"`` for the first of ``wrong`` that is no kind at all, or ``""`` (the hint
    every "unknown kind" error ends with; a real kind that a function does not take gets none)."""
    typo = next((str(k) for k in wrong if k not in TABLE), None)
    return closest(typo, names()) if typo is not None else ""
