"""One capture: which sites, which kinds, what is kept; it owns the hooks' lifecycle.

Hooks exist only inside the ``with`` block: they are registered in ``__enter__`` and removed
in ``__exit__``'s ``finally``, on a normal exit and on any exception (one raised inside
``backward()`` included). hookscope changes no flag of the model (``training``,
``requires_grad``): there is nothing to restore. Hook bodies copy and append; diagnosis
(what could not be captured, and why) runs once, at exit.

The hooks' bodies are ``Capture``'s mixins: ``hookscope.core.forward`` (what each call keeps, its
phase under checkpointing and ``torch.func``) and ``hookscope.core.backward`` (the gradients);
``hookscope.core.diagnosis`` works out what could not be captured. A compiled model runs eagerly,
named as the eager one (``core.compiled``); TorchScript ones are left out.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..base.display import Shows, table_of
from ..base.words import closest
from ..errors import CaptureError, CaptureWarning, NotCapturedError, OptionError
from .block import Block
from .call import Call
from .channels import channel_count
from .compiled import Eagerly, eager_keyed
from .diagnosis import annotate, warn_at_exit
from .experts import ExpertSites, left_out_note
from .forward import ForwardHooks
from .hooks import HandleGroup
from .kinds import Kind, at, choose, misspelled, names
from .phase import CallPhase, Regions
from .placement import shard_notes, this_rank
from .policy import Keeper, Policy, Reducer
from .records import CallTable, Label, Record, SitesPlot
from .scripted import hookable
from .select import Selector, experts_selected, select_modules


def capture(
    model: nn.Module | None = None,
    select: Selector | None = None,
    *,
    kinds: Kind | Iterable[Kind] = ("output",),
    detach: bool = True,
    clone: bool = True,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    reduce: Reducer | None = None,
) -> Capture:
    """Capture ``kinds`` at the modules of ``model`` that ``select`` picks, inside a ``with`` block.

    ``select=None`` picks every leaf module. ``kinds`` are ``input``, ``output``,
    ``grad_input``, ``grad_output`` and ``param_grad``. ``detach``, ``clone``, ``device`` and
    ``dtype`` decide what is stored (see ``hookscope.core.policy``); ``reduce(site, kind, key, tensor)``
    runs in the hook and returns what to keep instead (or None for nothing). With no model, the
    capture only records taps (``cap.tap(tensor, name)``).

    Args:
        model: the network whose modules are hooked; None for a capture that only records taps.
        select: which modules: a name, a glob (``"layer*.conv2"``), a module type, a predicate
            ``(name, module) -> bool`` or a list of these; None (the default) picks every leaf module.
        kinds: one kind or several, of ``input``, ``output``, ``grad_input``, ``grad_output`` and
            ``param_grad``; the default keeps outputs only.
        detach: store tensors without their autograd graph (the default); False keeps the graph, so
            stored tensors can be differentiated further.
        clone: store copies (the default), safe from later in-place ops; False stores references and
            warns at exit about any that changed.
        device: where copies go (``"cpu"`` moves them off the accelerator); None keeps each tensor's device.
        dtype: a floating dtype that floating tensors are cast to; None keeps their dtype.
        reduce: ``(site, kind, key, tensor) -> tensor | None``, run in the hook on each tensor; what it
            returns is kept in place of the tensor (None keeps nothing). See ``hookscope.reducers``.

    Returns:
        A ``Capture`` to open with ``with``; inside the block its hooks record, after it ``cap[name]``
        is the ``Record`` of each site.

    Raises:
        CaptureError: ``device`` is not a torch device, ``dtype`` not a floating dtype, ``reduce`` not
            callable, or ``select`` given without a model.
        SelectionError: ``model`` is not an ``nn.Module``, or ``select`` matches no module.
        OptionError: a kind is unknown.
    """
    policy = Policy.make(detach=detach, clone=clone, device=device, dtype=dtype)
    return Capture(model, select, kinds=kinds, policy=policy, reduce=reduce)


def shapes_of(model: nn.Module, *args: Any, **kwargs: Any) -> Capture:
    """Run ``model(*args, **kwargs)`` once under no_grad, recording every module call's outputs as
    meta tensors: shapes and dtypes, in call order, at no memory cost. Modules that never ran
    (containers such as ``nn.ModuleList``) simply have no calls; nothing is warned."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)
        with capture(model, lambda name, _: True, device="meta") as cap, torch.no_grad():
            model(*args, **kwargs)
    return cap


class Capture(ForwardHooks, Block, Mapping[str, Record], Shows, SitesPlot):
    """The sites of one capture, by name: ``cap["conv1"]`` is a ``Record``.

    Built by ``hookscope.capture``, which validates the storage options into ``policy``.

    Args:
        model: the network whose modules are hooked; None for taps only.
        select: which modules (a ``Selector``); None picks every leaf module.
        kinds: the kinds to keep at each site (``input``, ``output``, ``grad_input``, ``grad_output``,
            ``param_grad``).
        policy: how each tensor is stored (detached, cloned, moved, cast): a ``Policy``.
        reduce: ``(site, kind, key, tensor) -> tensor | None`` run in the hook; None keeps tensors whole.

    Raises:
        CaptureError: ``select`` without a model, or a ``reduce`` that is not callable.
        SelectionError: ``select`` matches no module of ``model``.
        OptionError: a kind is unknown.
    """

    noun, remake = "capture", "hookscope.capture(...)"

    def __init__(
        self,
        model: nn.Module | None,
        select: Selector | None,
        *,
        kinds: Kind | Iterable[Kind],
        policy: Policy,
        reduce: Reducer | None = None,
    ):
        self.model = model
        self.kinds = _check_kinds(kinds)
        self._pre, self._forward = at("pre", self.kinds), at("forward", self.kinds)
        self._input_grads, self._output_grads = at("input_grad", self.kinds), at("output_grad", self.kinds)
        self._param_grads = bool(at("param", self.kinds))
        self._before_call = bool(self._pre or self._input_grads)  # a pre-hook opens each call
        self._call_kinds, self._return_kinds = (*self._pre, *self._input_grads), (*self._forward, *self._output_grads)
        # a call may take _after's short way: one kind kept at the forward hook, nothing before the call or per site
        self._plain = len(self._forward) == 1 and not self._before_call and not self._param_grads
        if model is None and select is not None:
            raise CaptureError("a selector needs a model: call hookscope.capture(model, select)")
        self._modules = [] if model is None else hookable(model, select_modules(model, select), select, "capture")
        records = {
            name: Record(name, type(m).__name__, self.kinds, channels=channel_count(m)) for name, m in self._modules
        }
        # one site per fused expert when ":experts" is asked for (core.experts); select=None names them in a warning
        self._experts = ExpertSites(experts_selected(model, select), self.kinds)
        records.update(self._experts.records)
        self._left_out = left_out_note(model, select)
        self._table = CallTable()  # the calls filed flat by the hooks, every site's (core.records)
        for record in records.values():
            self._table.join(record)
        self._records = eager_keyed(model, records)  # a compiled model's site "0" is also cap["_orig_mod.0"]
        super().__init__(Eagerly(model))  # a compiled model runs eagerly while the block is open
        if reduce is not None and not callable(reduce):
            raise CaptureError(f"reduce must be a function (site, kind, key, tensor) -> tensor or None, got {reduce!r}")
        self._keeper = Keeper(policy, reduce)
        # the calls a pre-hook opened, with their phase (None: inside a torch.func transform)
        self._open: dict[str, list[tuple[Call | None, CallPhase | None]]] = {name: [] for name, _ in self._modules}
        self._order = itertools.count()
        self._grads_seen = False
        self._params_reached: set[str] = set()
        self._hooked: dict[str, dict[str, Tensor]] = {}  # site -> the parameters its param_grad hooks are on
        self._cleared: set[str] = set()  # sites that had calls before a clear()
        self._raised: dict[int, tuple[str, int]] = {}  # id(exception) -> the call it escaped from first
        self._regions: Regions[Call] = Regions()  # checkpointed calls, for their recomputation (core.phase)
        self._labels: dict[str, tuple[Kind, Label]] = {}  # site -> (kind, label) of its output, on the short way

    # -- the mapping -------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Record:
        if self._state == "active":
            self._keeper.wait()  # copies to the host still in flight land before anyone reads them
        try:
            return self._records[name]
        except KeyError:
            raise NotCapturedError(_unknown_site(name, list(self._records))) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __repr__(self) -> str:
        calls = sum(len(r.calls) for r in self._records.values())
        model = type(self.model).__name__ if self.model is not None else "no model"
        return f"<Capture of {model}: {len(self)} sites, {calls} calls, kinds={self.kinds}, {self._state}>"

    def table(self) -> str:
        """A row per site, in forward order: type, calls, kinds held, their shapes in call 0, bytes held (text).

        Returns:
            The table, as text.
        """
        return table_of(self)

    # -- lifecycle (core.block: entered once, hooks removed before the diagnosis) ------------------
    def _install(self, handles: HandleGroup) -> None:
        for note in shard_notes(self.model, self._modules, this_rank()):  # outputs that are pieces (core.placement)
            warnings.warn(f"hookscope.capture: {note}", CaptureWarning, stacklevel=4)
        if self._left_out is not None:
            warnings.warn(self._left_out, CaptureWarning, stacklevel=4)
        for name, module in self._modules:
            self._hook(self._records[name], module)

    def _release(self) -> None:
        self._open.clear()
        self._keeper.close()

    def _finish(self, exc: BaseException | None) -> None:
        self._keeper.wait()
        if exc is None:
            eager = self._eager is not None and self._eager.note is not None
            warn_at_exit(self._records, self._keeper, self.kinds, eager, cleared=self._cleared, model=self.model,
                         params_reached=self._params_reached, grads_seen=self._grads_seen)  # fmt: skip
        else:
            annotate(exc, self._raised)

    def clear(self) -> None:
        """Forget every call captured so far; the hooks stay. For long loops and dataset runs.

        Taps are forgotten too. Call it between batches, once their backward passes are done:
        a gradient that arrives later for a forgotten call is dropped.
        """
        dropped = self._table.kept() if self._keeper.pools else None
        self._cleared |= {record.name for record in self._table.clear()}
        for name in [name for name, record in self._records.items() if record.type == "tap"]:
            del self._records[name]
        if self._param_grads:
            for record in self._records.values():
                record.param_grads = {pname: [] for pname in record.param_grads}
        if self._before_call:
            for pending in self._open.values():
                pending.clear()
        self._keeper.forget(dropped)  # copies nothing else holds take the next batch's (core/pool)
        self._grads_seen = False
        self._params_reached.clear()
        self._regions.clear()

    def changed_in_place(self) -> list[str]:
        """``'site' kind key`` of each tensor stored by reference (``clone=False``) that an in-place op
        changed after the hook saw it (what the warning at exit lists).

        Returns:
            One ``'site' kind key`` label per changed tensor; empty with ``clone=True``.
        """
        return self._keeper.modified_references()

    def tap(self, tensor: Tensor, name: str, *, grad: bool = True) -> Tensor:
        """Record ``tensor`` as site ``name`` (``.value``) and, with ``grad``, its gradient (``.grad``).

        Returns ``tensor`` unchanged, so a tap can sit inside an expression. Tapping the same
        name again adds a call.

        Args:
            tensor: any tensor computed inside the block; it is stored under ``policy`` as key ``value``.
            name: the site it is recorded as; a name already tapped gets another call.
            grad: also hook its gradient (recorded as ``grad_output``), when it requires one; False
                stores the value only.

        Returns:
            ``tensor`` itself, unchanged.

        Raises:
            CaptureError: the capture is not active, ``tensor`` is not a tensor, or ``name`` is a module
                site of this capture.
        """
        if self._state != "active":
            raise CaptureError("tap() needs an active capture: call it inside `with hookscope.capture() as cap:`")
        if not isinstance(tensor, Tensor):
            raise CaptureError(f"tap({name!r}) expects a torch.Tensor, got {type(tensor).__name__}")
        if name not in self._records:
            kinds: tuple[Kind, ...] = ("output", "grad_output") if grad else ("output",)
            self._records[name] = self._table.join(Record(name, "tap", kinds))
        record = self._records[name]
        if record.type != "tap":
            raise CaptureError(f"tap name {name!r} is already a module of this capture; pick another name")
        call = Call(name, record.called(), order=next(self._order))
        record.add_call(call)
        call.tensors["output"] = self._keep_all([("value", tensor)], name, "output")
        if grad:
            self._watch(call, "grad_output", [("value", tensor)], "tensor")
        return tensor


def _check_kinds(asked: Kind | Iterable[Kind]) -> tuple[Kind, ...]:
    chosen, unknown = choose(asked, names())
    if unknown or not chosen:
        got = ", ".join(repr(k) for k in unknown) or "nothing"
        raise OptionError(f"unknown kind {got}; kinds are {', '.join(names())}{misspelled(unknown)}")
    return chosen


def _unknown_site(name: str, names: list[str]) -> str:
    hint = closest(name, names)
    return f"{name!r} is not a site of this capture ({len(names)} sites{hint}); list them with list(cap)"
