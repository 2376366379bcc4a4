"""Edits inside vLLM: hookscope's edit ops applied to one request's rows of a packed batch, and counted.

An edit runs on ``(1, n, ...)``: the request's ``n`` rows of this step as a batch of one sequence,
so ``edits.add(v)``, ``edits.zero(units=...)`` and ``positions=`` mean what they mean on an HF model
(position 0 is the step's first row). The block's ``positions=`` (``"prompt"``, ``"new"``, or
positions in the request's sequence) keeps the rows outside it as they were. A decoder layer's
key ``residual`` is the residual stream ``hidden + residual``: its edit ``r' = f(r)`` goes back
into ``hidden`` (``hidden + r' - r``), which is what the next layer adds up.

Each application is counted per (request, site, edit, call): elements changed, ``|y' - y|^2`` and
``|y|^2``; ``hookscope.serving.result`` turns them into the report. The edited output is a new
tensor; the engine's own tensors are never written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ..core.tree import flatten_layout, rebuild
from ..edits.edit_op import EditOp
from ..edits.values import Where
from ..errors import EditError
from ..stats.norms import square_sum
from .packing import Slice, chosen_rows, fused


@dataclass(eq=False)
class EditSite:
    """The edits of one module, and what each did (``rows``)."""

    name: str
    module: nn.Module
    ops: list[EditOp]
    layered: bool  # a decoder layer: its fused pair has the key "residual"
    calls: dict[str, int] = field(default_factory=dict)  # request -> its calls of this module so far
    counted: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        """A row per (request, edit, call) it was applied to; a problem is a row with ``note``."""
        return self.counted + [{"site": self.name, "note": why} for why in self.problems]


def edited_output(
    site: EditSite, output: Any, pieces: Sequence[Slice], chosen: set[str] | None, rows: int,
    positions: str | Sequence[int] | None,
) -> tuple[Any, dict[str, BaseException]]:  # fmt: skip
    """``output`` with ``site``'s edits applied to the rows of each chosen request (None: as it was), and
    the requests whose edit raised (their rows are left as they were)."""
    leaves, layout = flatten_layout(output)
    held, touched = dict(leaves), False
    failed: dict[str, BaseException] = {}
    calls = {p.request: site.calls.get(p.request, 0) for p in pieces}
    for piece in pieces:
        site.calls[piece.request] = calls[piece.request] + 1
    for op in site.ops:
        key = _key(site, op, held, output)
        if key is None:
            continue
        base = fused(output) if key == "residual" else held[key]
        if base is None or base.dim() < 1 or base.shape[0] != rows:
            _note(site, f"{op!r}: {key} is not one row per token of the step; it cannot be split by request")
            continue
        new = _apply(site, op, key, base, [p for p in pieces if chosen is None or p.request in chosen],
                     calls, positions, failed)  # fmt: skip
        if new is not None:
            touched = True
            if key == "residual":
                held["out[0]"] = held["out[0]"] + (new - base)
            else:
                held[key] = new
    if not touched:
        return None, failed
    return (held["out"] if type(output) is Tensor else rebuild(layout, held)), failed


def _apply(
    site: EditSite, op: EditOp, key: str, base: Tensor, pieces: Sequence[Slice], calls: dict[str, int],
    positions: str | Sequence[int] | None, failed: dict[str, BaseException],
) -> Tensor | None:  # fmt: skip
    new = None
    for piece in pieces:
        call = calls[piece.request]
        mask = chosen_rows(piece, positions)
        if (op.call is not None and op.call != call) or (mask is not None and not bool(mask.any())):
            continue
        part = base[piece.start : piece.end].unsqueeze(0)  # (1, n, ...): one sequence
        try:
            changed = op(part, Where(site.name, "output", key, call))
        except Exception as err:  # the request fails with it; the engine goes on
            failed[piece.request] = err
            continue
        if mask is not None:
            changed = torch.where(mask.view(1, -1, *[1] * (part.dim() - 2)), changed, part)
        site.counted.append(_counted(site.name, op, key, piece.request, call, part, changed))
        new = base.clone() if new is None else new
        new[piece.start : piece.end] = changed[0]
    return new


def _counted(site: str, op: EditOp, key: str, request: str, call: int, old: Tensor, new: Tensor) -> dict[str, Any]:
    return {"request": request, "site": site, "edit": repr(op), "key": key, "call": call,
            "changed": int((old != new).sum()), "elements": old.numel(),
            "diff2": float(square_sum(new - old)), "base2": float(square_sum(old)), "zeroes": op.zeroes}  # fmt: skip


def _key(site: EditSite, op: EditOp, held: dict[str, Tensor], output: Any) -> str | None:
    """The key ``op`` edits: its ``key=``, else ``residual`` at a decoder layer, else the one tensor."""
    residual = site.layered and fused(output) is not None
    if op.key is not None:
        if op.key in held or (op.key == "residual" and residual):
            return op.key
        _note(site, f"{op!r}: key {op.key!r} never appeared; its output holds {', '.join(held) or 'no tensor'}")
        return None
    if residual:
        return "residual"
    if len(held) == 1:
        return next(iter(held))
    _note(site, f"{op!r}: its output holds {len(held)} tensors ({', '.join(list(held)[:4])}); pass key=")
    return None


def _note(site: EditSite, why: str) -> None:
    if why not in site.problems:
        site.problems.append(why)


def check_kinds(ops: Sequence[EditOp]) -> None:
    """Refuse the edits vLLM cannot run: only outputs are edited (no gradient ever flows in a server).

    Args:
        ops: the edits of a block.

    Raises:
        EditError: an edit of ``input`` or ``grad_output``.
    """
    for op in ops:
        if op.kind != "output":
            raise EditError(f"{op!r} edits {op.kind}; inside vLLM only kind='output' edits run (no gradient flows)")
