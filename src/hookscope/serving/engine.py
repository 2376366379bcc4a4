"""``hookscope.capture_llm``: a capture around a vLLM ``LLM``, per request; the blocks' engine side.

::

    with hookscope.capture_llm(llm, ["model.layers.0", "model.layers.1"], out="acts.hookscope") as cap:
        outputs = llm.generate(prompts, params)
    cap.store().batch(cap.batches["0"])           # request 0's records, read from the store

``EngineBlock`` is what ``LLMCapture`` and ``LLMEdit`` (``hookscope.serving.intervene``) share.
The blocks reach every worker through ``LLM.collective_rpc`` with the functions of
``hookscope.serving.worker``: in process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) they run on this
thread; in the multiprocess engine they travel by module and name, which vLLM allows with
``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (refused with that fix when it is not set).

Never silent, at the end of the block: a site that never fired raises ``ServingError`` naming the
cause (a compiled worker, ``enforce_eager=False``: its compiled graph never calls a module hook;
``lm_head``, whose weight vLLM's logits processor reads without calling it); a hook that raised
fails its request with ``ServingError`` (the hook's error in the message), while the engine went on
serving every other request and keeps serving; an edit that never ran, never reached a chosen
request, or changed nothing raises ``EditError``. ``strict=False`` warns instead.

Tensor parallel: ``collective_rpc`` reaches every rank, each hooks its piece of the model, and rank 0
hands back the records of the unsplit model (``hookscope.serving.parallel``). Pipeline parallel is refused.
"""

from __future__ import annotations

import importlib
import os
import pickle
import secrets
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from ..core.block import Block
from ..core.hooks import HandleGroup
from ..core.kinds import Kind, forward_kinds
from ..core.records import Record
from ..core.select import Selector
from ..errors import EditError, EditWarning, NotCapturedError, OptionError, ServingError, ServingWarning
from ..store.format import FLUSH_EVERY, MANIFEST, MAX_MEMORY, SHARD_SIZE
from ..store.reader import Run, load
from . import worker
from .parallel import merged
from .sink import held_prompts, prompt_digest

COMPILED = "the worker is compiled (enforce_eager=False): its graph never calls a module's hooks; " \
           "build the LLM with enforce_eager=True"  # fmt: skip
NOT_CALLED = {"lm_head": "vLLM's logits processor reads lm_head's weight without calling the module"}


def capture_llm(
    llm: Any,
    select: Selector | None = None,
    *,
    kinds: Kind | Iterable[Kind] = ("output",),
    out: str | os.PathLike[str] | None = None,
    force: bool = False,
    resume: bool = False,
    max_memory: int | str = MAX_MEMORY,
    shard_size: int | str = SHARD_SIZE,
    flush_every: float | None = FLUSH_EVERY,
    strict: bool = True,
) -> LLMCapture:
    """Capture ``kinds`` at the modules ``select`` picks inside a vLLM ``LLM``, per request (module doc).

    Each request is its own capture: call 0 of a site is the request's prefill, call ``k`` its
    ``k``-th decode step, each its rows of the packed batch. A decoder layer's fused pair
    ``(hidden, residual)`` is kept as ``out[0]``, ``out[1]`` and their sum ``residual``.

    Args:
        llm: a ``vllm.LLM`` built with ``enforce_eager=True`` (any ``tensor_parallel_size``: module doc).
        select: which modules of the worker's model (``llm.apply_model(hookscope.list_modules)``
            lists them): a name, a glob, a type, a predicate or a list; None picks the decoder layers
            (each child of the model's layer list), whose ``residual`` is the residual stream.
        kinds: ``output`` (the default), ``input``, or both.
        out: a store each finished request streams to, as one batch (``hookscope.load(out)``); None keeps
            the records in memory (``cap[request]``).
        force: replace an existing ``out`` that hookscope wrote.
        resume: continue an existing ``out`` (a killed run's, or a finished one): batch numbers go on after
            its last, and a request whose prompt (its token ids) it already holds is not written again
            (``cap.skipped``); ``cap.pending(prompts)`` lists the prompts it does not hold yet.
        max_memory: the bytes of finished requests held before they are written, in bytes or as text.
        shard_size: the most bytes per shard file, in bytes or as text.
        flush_every: seconds a finished request may wait in memory before it is written.
        strict: raise at the end of the block when a site never fired; False warns instead.

    Returns:
        An ``LLMCapture`` to open with ``with`` around ``llm.generate``.

    Raises:
        OptionError: a kind other than ``input`` and ``output``.
        ServingError: (at ``with``) a pipeline-parallel or unreachable engine; (at its end) a site that never
            fired, or a request whose hook raised.
        SelectionError: ``select`` matches no module of the worker's model.
        OutputExistsError: ``out`` exists and neither ``resume`` nor ``force`` was given.
        StoreError: (at ``with``) the store resumed was made with other sites, kinds or weights.
    """
    chosen: tuple[Kind, ...] = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    if not chosen or any(k not in forward_kinds() for k in chosen):
        raise OptionError(f"capture_llm keeps kinds 'input' and 'output' (no gradient flows in vLLM), got {chosen}")
    store = None if out is None else {"out": os.fspath(out), "force": force, "resume": resume, "max_memory": max_memory,
                                      "shard_size": shard_size, "flush_every": flush_every}  # fmt: skip
    spec = worker.Spec(token(), select=select, kinds=chosen, store=store)
    return LLMCapture(llm, spec, strict=strict)


class EngineBlock(Block):
    """A block whose hooks live in vLLM's workers: installed and collected through ``collective_rpc``
    (``LLMCapture`` here, ``LLMEdit`` in ``hookscope.serving.intervene``)."""

    def __init__(self, llm: Any, spec: worker.Spec, *, strict: bool) -> None:
        super().__init__()
        self.llm, self.spec, self.strict = llm, spec, strict
        self.info: dict[str, Any] = {}
        self.found: dict[str, Any] = {}
        self._packed = False  # the workers run in another process: what crosses is pickled
        self._ok = False  # the block ended without an exception: a store is finished, not just let go

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._ok = exc is None
        super().__exit__(exc_type, exc, tb)

    def _install(self, handles: HandleGroup) -> None:
        self._packed = check_engine(self.llm)
        spec = _pickled(self.spec) if self._packed else self.spec
        self.info = self.llm.collective_rpc(worker.install, args=(spec,))[0]  # one per rank: rank 0's
        if self.info.get("split"):
            raise EditError(
                f"{', '.join(repr(s) for s in self.info['split'])}: each tensor-parallel rank holds only its piece of "
                "this output, so an edit there would not see the whole value; edit a decoder layer (its output "
                "is whole on every rank) or build the LLM with tensor_parallel_size=1"
            )

    def _release(self) -> None:
        if self.info:
            every = self.llm.collective_rpc(worker.finish, args=(self.spec.token, self._ok, self._packed))
            self.found = merged([pickle.loads(f) if isinstance(f, bytes) else f for f in every])

    def _finish(self, exc: BaseException | None) -> None:
        if exc is not None or not self.found:
            return
        failed = self.found["errors"]
        if failed:
            request, why = next(iter(failed.items()))
            more = f" ({len(failed) - 1} more request(s) failed too)" if len(failed) > 1 else ""
            raise ServingError(f"request {request!r} failed: {why}{more}; the engine went on serving the other "
                               "requests and no hook is left in it")  # fmt: skip
        self._check()

    def _check(self) -> None:
        """What the block raises (or warns) about, once no request failed."""
        raise NotImplementedError

    def _why_silent(self, site: str) -> str:
        if not self.info.get("eager", True):
            return COMPILED
        last = site.rsplit(".", 1)[-1]
        return NOT_CALLED.get(last, "the engine never called it; was llm.generate called inside the block?")

    def _fail(self, message: str, error: type[Exception] = ServingError) -> None:
        if self.strict:
            raise error(f"{message}; pass strict=False to warn instead")
        warnings.warn(message, EditWarning if error is EditError else ServingWarning, stacklevel=5)  # the user's with

    @property
    def unreadable(self) -> list[str]:
        """Parameters of the hooked modules that the engine repacked (empty tensors on vLLM's CPU backend):
        their values cannot be read from the worker's model."""
        return list(self.info.get("unreadable", []))


class LLMCapture(EngineBlock, Mapping[str, Mapping[str, Record]]):
    """The records of a vLLM capture, by request id: ``cap["0"]["model.layers.0"].calls[k]``.

    Built by ``hookscope.capture_llm``.

    Args:
        llm: the ``vllm.LLM``.
        spec: what every worker hooks.
        strict: raise when a site never fired; False warns.
    """

    noun, remake = "vLLM capture", "hookscope.capture_llm(...)"

    def __getitem__(self, request: str) -> Mapping[str, Record]:
        records = self.found.get("records", {})
        if request not in records:
            held = ", ".join(repr(r) for r in list(records)[:6]) or "none"
            where = f"; its records went to the store {self.spec.store['out']}" if self.spec.store else ""
            raise NotCapturedError(f"request {request!r} was not captured (requests: {held}){where}")
        return records[request]  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[str]:
        return iter(self.found.get("records", {}))

    def __len__(self) -> int:
        return len(self.found.get("records", {}))

    def _check(self) -> None:
        dead = [f"{site!r} ({self._why_silent(site)})" for site, n in self.found["fired"].items() if n == 0]
        if dead:
            self._fail(f"{len(dead)} selected site(s) never fired inside the block: {', '.join(dead[:4])}"
                       f"{' ...' if len(dead) > 4 else ''}")  # fmt: skip

    def sequence(self, request: str, site: str, *, key: str = "residual") -> Tensor:
        """Request ``request``'s ``key`` at ``site`` over every call, one row per token: ``(tokens, ...)``.

        Args:
            request: the request id (``RequestOutput.request_id``).
            site: the module's name.
            key: the tensor of its output: ``residual`` (a decoder layer's stream), ``out``, ``out[0]``...

        Returns:
            The calls' tensors joined along their first dimension (prefill rows, then one per decode step).

        Raises:
            NotCapturedError: no such request, site or key.
        """
        record = self[request].get(site)
        if record is None:
            raise NotCapturedError(f"{site!r} is not a site of this capture; sites: {', '.join(self[request])}")
        try:
            return torch.cat([call.tensors["output"][key] for call in record.calls])
        except KeyError:
            keys = ", ".join(record.calls[0].tensors.get("output", {})) if record.calls else "nothing"
            raise NotCapturedError(f"{site!r} holds no key {key!r}; its output holds {keys}") from None

    def tokens(self, request: str) -> Tensor:
        """The token ids request ``request`` fed through the model: its prompt, then each generated token
        but the last.

        Args:
            request: the request id.

        Returns:
            A ``(tokens,)`` int tensor.

        Raises:
            NotCapturedError: the request was not captured.
        """
        held = self.found.get("tokens", {})
        if request not in held:
            raise NotCapturedError(f"request {request!r} was not captured (requests: {', '.join(held) or 'none'})")
        return held[request]  # type: ignore[no-any-return]

    @property
    def batches(self) -> dict[str, int]:
        """request id -> its batch in the store (``out=``), as the store's manifest says (its ``batches``
        rows' ``request``), for the requests this block wrote; empty without a store."""
        written = set(self.found.get("written", {}).values())
        if not written:
            return {}
        if self.found.get("stored") is None:  # read once, after the block
            rows = self.store().manifest.get("batches", [])
            self.found["stored"] = {b["request"]: b["index"] for b in rows if b["index"] in written and "request" in b}
        return dict(self.found["stored"])

    @property
    def skipped(self) -> list[str]:
        """The requests of this block left out of the store, since ``resume=True`` found their prompt in it."""
        return list(self.found.get("skipped", []))

    def pending(self, prompts: Sequence[Any]) -> list[Any]:
        """The prompts of ``prompts`` whose token ids the store (``out=``) does not hold yet, in order: what a
        resumed run still has to generate (``llm.generate(cap.pending(prompts), ...)``).

        Args:
            prompts: what ``llm.generate`` takes: text (tokenized by the LLM's tokenizer, as vLLM does),
                ``{"prompt_token_ids": [...]}``, ``{"prompt": text}``, or a list of token ids.

        Returns:
            Those not in the store, the same objects; every one when there is no store yet.

        Raises:
            ServingError: the capture has no ``out=``, or a prompt is none of those forms.
        """
        if self.spec.store is None:
            raise ServingError("this capture keeps its records in memory: pass out= to capture_llm for a store")
        out = self.spec.store["out"]
        made = os.path.isfile(os.path.join(out, MANIFEST))
        held = held_prompts(load(out).manifest["batches"]) if made else set()
        return [p for p in prompts if prompt_digest(prompt_ids(self.llm, p)) not in held]

    def store(self) -> Run:
        """The store the requests streamed to, opened (``hookscope.load(out)``).

        Returns:
            The ``Run``.

        Raises:
            ServingError: the capture had no ``out=``.
        """
        if self.spec.store is None:
            raise ServingError("this capture kept its records in memory: pass out= to capture_llm for a store")
        return load(self.spec.store["out"])


def prompt_ids(llm: Any, prompt: Any) -> list[int]:
    """The token ids vLLM feeds for ``prompt`` (``LLMCapture.pending``'s forms): text through the LLM's
    tokenizer with its special tokens, as vLLM's renderer encodes it."""
    if isinstance(prompt, Mapping) and "prompt_token_ids" in prompt:
        return [int(i) for i in prompt["prompt_token_ids"]]
    text = prompt.get("prompt") if isinstance(prompt, Mapping) else prompt
    if isinstance(text, str):
        return [int(i) for i in llm.get_tokenizer()(text)["input_ids"]]
    if isinstance(prompt, Sequence) and all(isinstance(i, int) for i in prompt):
        return [int(i) for i in prompt]
    raise ServingError(f"a prompt is text, {{'prompt_token_ids': [...]}}, {{'prompt': text}} or token ids, "
                       f"got {type(prompt).__name__}")  # fmt: skip


def check_engine(llm: Any) -> bool:
    """Refuse an engine hookscope cannot hook as asked; True when its workers run in another process."""
    engine = getattr(llm, "llm_engine", None)
    if engine is None or not hasattr(llm, "collective_rpc"):
        raise ServingError(f"expected a vllm.LLM, got {type(llm).__name__}")
    parallel = engine.vllm_config.parallel_config
    if parallel.pipeline_parallel_size > 1:
        raise ServingError(
            f"pipeline_parallel_size={parallel.pipeline_parallel_size}: each pipeline stage holds only some layers "
            "and hookscope.serving hooks every worker's whole layer list; build the LLM with pipeline_parallel_size=1 "
            "(tensor_parallel_size above 1 is captured and edited)"
        )
    multiprocess = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") not in ("0", "false", "False")
    if multiprocess and os.environ.get("VLLM_ALLOW_INSECURE_SERIALIZATION") != "1":
        raise ServingError(
            "vLLM's multiprocess engine runs hookscope's worker functions only with "
            "VLLM_ALLOW_INSECURE_SERIALIZATION=1 set before the LLM is built (or build it in process: "
            "VLLM_ENABLE_V1_MULTIPROCESSING=0)"
        )
    return multiprocess or parallel.tensor_parallel_size > 1  # tensor parallel: the ranks are processes


def _pickled(spec: worker.Spec) -> bytes:
    """``spec`` as bytes for a worker process: cloudpickle (vLLM's dependency) carries the edits' functions."""
    return bytes(importlib.import_module("cloudpickle").dumps(spec))


def token() -> str:
    """A new block's name among its workers' sessions."""
    return f"hookscope-{secrets.token_hex(6)}"
