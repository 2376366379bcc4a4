"""``hookscope.edit_llm``: hookscope's edits inside a vLLM ``LLM``, per request and call, and their report.

::

    with hookscope.edit_llm(llm, {"model.layers.0": edits.add(v)}, positions="new") as ed:
        steered = llm.generate(prompts, params)
    print(ed.report())          # per request and call: elements changed, |y' - y| / |y|

The block is an ``EngineBlock`` (``hookscope.serving.engine``): its hooks live in the workers
(``hookscope.serving.worker``), each edit is applied to one request's rows
(``hookscope.serving.steering``). At its end, an edit that never ran (a compiled worker, a site
vLLM never calls, no ``generate`` inside the block), that never reached a chosen request or that
changed nothing raises ``EditError`` (``strict=False``: ``EditWarning``); a request whose edit raised
fails with ``ServingError`` while the engine went on serving the others. With tensor parallel, every
rank applies the edit to its copy of a replicated output (a decoder layer's: checked to agree on the
first call); an output split over the ranks (``qkv_proj``, ``gate_up_proj``) is refused at ``with``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.select import Selector
from ..edits.edit import EditSpec
from ..edits.ops import as_op
from ..errors import EditError, OptionError
from . import (
    views,  # noqa: F401  (registers the edit report's table and notebook view)
    worker,
)
from .engine import EngineBlock, token
from .packing import WHICH
from .result import RequestEdits
from .result import failures as failed_edits
from .steering import check_kinds


def edit_llm(
    llm: Any,
    edits: Mapping[Selector, EditSpec],
    *,
    requests: Iterable[str | int] | None = None,
    positions: str | Sequence[int] | None = None,
    strict: bool = True,
) -> LLMEdit:
    """Edit the outputs of the modules each selector picks inside a vLLM ``LLM``, per request (module doc).

    Args:
        llm: a ``vllm.LLM`` built with ``enforce_eager=True`` (any ``tensor_parallel_size``: module doc).
        edits: selector -> an edit of ``hookscope.edits`` (kind ``output``) or a function ``(tensor,
            call) -> tensor``, or a list of them applied in order. A decoder layer's edit acts on its
            residual stream (key ``residual``) unless ``key=`` says otherwise.
        requests: the request ids (``RequestOutput.request_id``) edited; None edits every request.
        positions: ``"prompt"``, ``"new"`` (the generated tokens) or positions in each request's sequence;
            None edits every token.
        strict: raise ``EditError`` when an edit never took effect; False warns ``EditWarning``.

    Returns:
        An ``LLMEdit`` to open with ``with`` around ``llm.generate``; ``report()`` after it.

    Raises:
        EditError: ``edits`` is empty, an edit is not of kind ``output``, (at ``with``) an edit of a module
            whose output is split over tensor-parallel ranks, or (at the block's end) an edit never took effect.
        OptionError: ``positions`` is neither ``"prompt"``, ``"new"``, positions nor None.
        ServingError: (at ``with``) a pipeline-parallel or unreachable engine; (at its end) a request whose
            edit raised.
        SelectionError: a selector matches no module of the worker's model.
    """
    if not isinstance(edits, Mapping) or not edits:
        raise EditError("edit_llm needs a dict {selector: edit}, e.g. {'model.layers.0': edits.add(v)}")
    pairs = []
    for selector, value in edits.items():
        listed: Sequence[Any] = value if isinstance(value, (list, tuple)) else [value]
        ops = [as_op(one) for one in listed]
        check_kinds(ops)
        pairs.append((selector, ops))
    if isinstance(positions, str) and positions not in WHICH:
        raise OptionError(f"positions must be 'prompt', 'new', positions or None, got {positions!r}")
    which = positions if positions is None or isinstance(positions, str) else tuple(int(p) for p in positions)
    chosen = None if requests is None else tuple(str(r) for r in requests)
    spec = worker.Spec(token(), edits=pairs, requests=chosen, positions=which)
    return LLMEdit(llm, spec, strict=strict)


class LLMEdit(EngineBlock):
    """A vLLM edit block; ``report()`` after it. Built by ``hookscope.edit_llm``.

    Args:
        llm: the ``vllm.LLM``.
        spec: what every worker edits.
        strict: raise ``EditError`` when an edit never took effect; False warns.
    """

    noun, remake = "vLLM edit block", "hookscope.edit_llm(...)"

    def report(self) -> RequestEdits:
        """Every edit at every module, per request and call: elements changed, relative change.

        Returns:
            A ``RequestEdits`` (``table()``, ``calls(request)``, ``rows``).
        """
        return RequestEdits(self.found.get("edits", []))

    def _check(self) -> None:
        failures = failed_edits(self.report(), self.spec.requests, self.found["fired"], self._why_silent)
        if failures:
            more = f" (and {len(failures) - 1} more; see .report())" if len(failures) > 1 else ""
            self._fail(f"{failures[0]}{more}", EditError)
