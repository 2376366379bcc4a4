"""What runs beside the model in each vLLM worker: the hooks, per request, and what they found.

The driver (``hookscope.serving.engine``) calls ``install(worker, spec)`` and ``finish(worker,
token)`` through ``LLM.collective_rpc``; both live in this importable module because the
multiprocess engine sends a function by its module and name (a closure or a function of
``__main__`` does not arrive). In process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) they run here,
on the driver's own thread.

A forward pre-hook on the runner's model reads each step's packing (``hookscope.serving.packing``)
before any selected module runs; each selected module's hook then slices its packed tensors per
request. A request's first step is call 0 of each site (its prefill), every later step one more
call. A decoder layer (a child of an ``nn.ModuleList``) that returns the fused pair ``(hidden,
residual)`` also gets key ``residual``, their sum: the residual stream HF calls ``hidden_states``.

Nothing a hook does reaches the engine: an exception (a user's edit function that raises) is kept
against the request it was running for, that request is neither captured nor edited further, and
``finish`` hands the error back for the driver to raise. Every hook goes in finish's ``finally``.
"""

from __future__ import annotations

import importlib
import pickle
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from ..core.call import Call
from ..core.hooks import HandleGroup
from ..core.kinds import Kind
from ..core.records import Record
from ..core.select import Selector, select_modules
from ..core.tree import Leaves, flatten_call_layout, flatten_layout
from .packing import Slice, fused, slices
from .parallel import checked, layout, ranks
from .sink import RequestSink
from .steering import EditSite, edited_output

_SESSIONS: dict[str, Session] = {}  # token -> the open session of a block, in this worker process


@dataclass
class Spec:
    """What a block asks of every worker (plain data: it travels to worker processes).

    Attributes:
        token: the block's name among the worker's sessions.
        select: the modules captured (a ``Selector``); None: the decoder layers (children of a ``ModuleList``).
        kinds: ``input`` and/or ``output``, what a capture keeps.
        edits: ``(selector, [EditOp, ...])`` pairs of an edit block.
        requests: the request ids an edit is limited to; None: every request.
        positions: ``"prompt"``, ``"new"`` or positions an edit is limited to; None: every token.
        store: the store's options (``out``, ``force``, ...) when records stream to one; None keeps them.
    """

    token: str
    select: Selector | None = None
    kinds: tuple[Kind, ...] = ()
    edits: list[tuple[Selector, list[Any]]] = field(default_factory=list)
    requests: tuple[str, ...] | None = None
    positions: str | tuple[int, ...] | None = None
    store: dict[str, Any] | None = None


class Session:
    """One block's hooks in one worker, and everything they kept (see the module docstring)."""

    def __init__(self, model: nn.Module, runner: Any, spec: Spec) -> None:
        self.model, self.runner, self.spec = model, runner, spec
        self.handles = HandleGroup()
        self.step: list[Slice] = []
        self.rows = 0  # rows of the packed batch in this step
        self.fired: dict[str, int] = {}  # site -> steps it ran in
        self.records: dict[str, dict[str, Record]] = {}  # request -> site -> Record
        self.tokens: dict[str, list[Tensor]] = {}  # request -> the token ids it fed, step by step
        self.prompts: dict[str, int] = {}  # request -> its prompt's length
        self.errors: dict[str, str] = {}  # request -> the error a hook raised for it
        self.live: dict[str, None] = {}  # requests of the last step, in batch order (a finished one's batch follows it)
        names = dict(model.named_modules())
        layered = {
            f"{p}.{c}" if p else c
            for p, m in names.items()
            if isinstance(m, nn.ModuleList)
            for c, _ in m.named_children()
        }
        if not spec.kinds:  # an edit block
            self.sites: list[tuple[str, nn.Module]] = []
        elif spec.select is None:  # the decoder layers: the residual stream
            self.sites = [(n, m) for n, m in names.items() if n in layered]
        else:
            self.sites = select_modules(model, spec.select)
        self.layers = {n for n, _ in self.sites} & layered
        self.edits = [
            EditSite(n, m, ops, n in layered) for sel, ops in spec.edits for n, m in select_modules(model, sel)
        ]
        self.ranks = ranks()  # tensor parallel: values made whole on every rank, kept and written by rank 0
        self.keeps = self.ranks is None or self.ranks.rank == 0
        store = spec.store if self.keeps else None
        self.sink = RequestSink(model, self.sites, spec.kinds, spec.select, store) if store else None

    # -- lifecycle --------------------------------------------------------------------------
    def install(self) -> None:
        self.handles.on_forward_pre(self.model, self._step_starts)
        self.handles.on_forward(self.model, self._step_ends, always_call=False)
        for name, module in self.sites:
            self.fired[name] = 0
            if "input" in self.spec.kinds:
                self.handles.on_forward_pre(module, partial(self._before, name))
            if "output" in self.spec.kinds:
                self.handles.on_forward(module, partial(self._after, name), always_call=False)
        for site in self.edits:
            self.fired[site.name] = 0
            self.handles.on_forward(site.module, partial(self._edit, site), always_call=False)

    def close(self, ok: bool) -> dict[str, Any]:
        self.handles.remove()
        written: tuple[dict[str, int], list[str]] = ({}, [])
        if self.sink is not None:
            try:
                for request in list(self.records):
                    self._hand_over(request)
            finally:
                written = self.sink.close(ok=ok and not self.errors)
        return {"fired": self.fired, "errors": self.errors, "written": written[0], "skipped": written[1],
                "records": self.records, "tokens": {r: torch.cat(t) for r, t in self.tokens.items() if t},
                "edits": [row for site in self.edits for row in site.rows()], **checked(self.ranks)}  # fmt: skip

    # -- the step -----------------------------------------------------------------------------
    def _step_starts(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            ids, positions = _argument(args, kwargs, 0, "input_ids"), _argument(args, kwargs, 1, "positions")
            self.step, self.rows = _packing(self.runner, positions)
            for piece in self.step:
                self.prompts.setdefault(piece.request, piece.prompt)
                if ids is not None and piece.request not in self.errors:
                    self.tokens.setdefault(piece.request, []).append(ids[piece.start : piece.end].to("cpu", copy=True))
            now = dict.fromkeys(p.request for p in self.step)
            ended = [r for r in self.live if r not in now]  # in the engine's batch order: stable batch numbers
            self.live = now
            for request in ended if self.sink is not None else ():
                self._hand_over(request)
        except Exception as err:  # never into the engine: every request of the step fails with it
            self.step = []
            for request in self.live:
                self.errors.setdefault(request, _described(err, "reading the step's batch"))

    def _step_ends(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        self.step, self.rows = [], 0

    def _hand_over(self, request: str) -> None:
        records = self.records.pop(request, None)
        if records is not None and request not in self.errors and self.sink is not None:
            tokens = self.tokens.get(request)
            self.sink.put(request, records, torch.cat(tokens) if tokens else None, self.prompts.get(request, 0))

    # -- the hooks ------------------------------------------------------------------------------
    def _before(self, name: str, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            self._keep(name, module, "input", flatten_call_layout(args, kwargs)[0])
            if "output" not in self.spec.kinds and self.step:
                self.fired[name] += 1
        except Exception as err:  # never into the engine
            self._fail_step(err, f"capturing {name!r}")

    def _after(self, name: str, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        try:
            leaves = flatten_layout(output)[0]
            residual = fused(output) if name in self.layers else None
            if residual is not None:
                leaves = [("residual", residual), *leaves]
            self._keep(name, module, "output", leaves)
            if self.step:
                self.fired[name] += 1
        except Exception as err:  # never into the engine
            self._fail_step(err, f"capturing {name!r}")

    def _fail_step(self, err: Exception, where: str) -> None:
        """Every request of this step fails with ``err`` (it was raised for the step, not one request)."""
        for piece in self.step:
            self.errors.setdefault(piece.request, _described(err, where))

    def _keep(self, name: str, module: nn.Module, kind: str, leaves: Leaves) -> None:
        if not self.step:
            return
        packed = [(key, t) for key, t in leaves if t.dim() >= 1 and t.shape[0] == self.rows]
        if self.ranks is not None:  # every rank gathers (a collective); rank 0 keeps
            packed = self.ranks.whole(name, module, kind, packed)
        if not self.keeps:
            return
        type_name = type(module).__name__
        for piece in self.step:
            if piece.request in self.errors:
                continue
            try:
                record = self._record(piece.request, name, type_name)
                call = _call_for(record, kind, piece)
                call.tensors[kind] = {
                    key: t[piece.start : piece.end].detach().to("cpu", copy=True) for key, t in packed
                }
            except Exception as err:
                self.errors[piece.request] = _described(err, f"capturing {name!r}")

    def _record(self, request: str, name: str, type_name: str) -> Record:
        sites = self.records.setdefault(request, {})
        if name not in sites:
            sites[name] = Record(name, type_name, self.spec.kinds)
        return sites[name]

    def _edit(self, site: EditSite, module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        if not self.step:
            return None
        self.fired[site.name] += 1
        pieces = [p for p in self.step if p.request not in self.errors]
        chosen = set(self.spec.requests) if self.spec.requests is not None else None
        try:
            if self.ranks is not None:  # an edit is sound where every rank holds the whole value: checked once
                leaves = flatten_layout(output)[0]
                self.ranks.whole(site.name, module, "output", [(k, t) for k, t in leaves if t.dim() >= 1])
            edited, failed = edited_output(site, output, pieces, chosen, self.rows, self.spec.positions)
        except Exception as err:  # never into the engine: the output goes on unedited
            self._fail_step(err, f"the edit at {site.name!r}")
            return None
        for request, raised in failed.items():
            self.errors[request] = _described(raised, f"the edit at {site.name!r}")
        return edited


def install(worker: Any, spec: Spec | bytes) -> dict[str, Any]:
    """Open ``spec``'s session in this worker: its hooks go on the runner's model (``collective_rpc`` target).

    Args:
        worker: the vLLM worker (what ``collective_rpc`` passes first).
        spec: what the block asks; pickled (bytes) from a driver in another process, whose messages
            would turn a dataclass into a dict.

    Returns:
        What the driver checks before ``generate``: ``eager`` (False for a compiled worker), the sites
        hooked, and ``unreadable``: parameters of those sites that the engine repacked (empty tensors).
    """
    if isinstance(spec, bytes):
        spec = pickle.loads(spec)
    assert isinstance(spec, Spec)
    runner = worker.model_runner
    model = runner.model
    session = Session(model, runner, spec)
    try:
        session.install()
    except BaseException:
        session.close(ok=False)
        raise
    _SESSIONS[spec.token] = session
    hooked = [n for n, _ in session.sites] + [s.name for s in session.edits]
    config = runner.vllm_config
    size = session.ranks.size if session.ranks is not None else 1
    split = [s.name for s in session.edits if layout(s.module, "output", size) is not None]
    return {"eager": bool(config.model_config.enforce_eager), "sites": hooked, "rank": _rank(), "split": split,
            "unreadable": _repacked(model, hooked), "compilation": str(config.compilation_config.mode)}  # fmt: skip


def finish(worker: Any, token: str, ok: bool = True, packed: bool = False) -> dict[str, Any] | bytes:
    """Close the session ``token``: its hooks removed, its store finished, what it kept handed back.

    Args:
        worker: the vLLM worker.
        token: the session's name (``Spec.token``).
        ok: False when the block ended by an exception: a store is released, not finished.
        packed: return it pickled (for a driver in another process: records are objects, not messages).

    Returns:
        ``fired`` (site -> steps), ``errors`` (request -> what a hook raised), ``records`` (request ->
        site -> ``Record``; empty when they went to a store), ``tokens``, ``written`` (request -> batch),
        ``skipped`` (requests whose prompt the resumed store held) and ``edits`` rows.
    """
    session = _SESSIONS.pop(token, None)
    found = session.close(ok) if session is not None else {}
    return pickle.dumps(found) if packed else found


# -- small parts ----------------------------------------------------------------------------------
def _packing(runner: Any, positions: Tensor | None) -> tuple[list[Slice], int]:
    """This step's requests and the rows of its packed batch, from the forward context (read now: vLLM
    reuses the buffers next step)."""
    context = importlib.import_module("vllm.forward_context")  # vLLM's venv only: no import at module level
    if not context.is_forward_context_available():
        return [], 0
    meta = context.get_forward_context().attn_metadata
    meta = meta[0] if isinstance(meta, list) else meta
    if not meta:
        return [], 0
    starts = next(iter(meta.values())).query_start_loc.tolist()
    batch = runner.input_batch
    count = min(len(starts) - 1, batch.num_reqs)
    ids = list(batch.req_ids[:count])
    prompts = [int(batch.num_prompt_tokens[i]) for i in range(count)]
    rows = positions.shape[0] if positions is not None else starts[count]
    return slices(ids, starts[: count + 1], positions, prompts), int(rows)


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Tensor | None:
    value = kwargs.get(name, args[index] if len(args) > index else None)
    return value if isinstance(value, Tensor) else None


def _call_for(record: Record, kind: str, piece: Slice) -> Call:
    """The call of this step: a new one, unless the pre-hook of this step already opened it."""
    if kind == "output" and "input" in record.kinds and record.calls and "output" not in record.calls[-1].tensors:
        return record.calls[-1]
    call = Call(record.name, len(record.calls))
    record.add_call(call)
    return call


def _repacked(model: nn.Module, names: Iterable[str]) -> list[str]:
    modules = dict(model.named_modules())
    return [f"{n}.{p}" if n else p for n in names for p, t in modules[n].named_parameters() if t.numel() == 0]


def _rank() -> int:
    try:
        return int(importlib.import_module("vllm.distributed").get_tensor_model_parallel_rank())
    except Exception:  # no tensor-parallel group (a bare worker): rank 0
        return 0


def _described(err: BaseException, where: str) -> str:
    lines = traceback.format_exception_only(type(err), err)
    return f"{where} raised {''.join(lines).strip()}"
