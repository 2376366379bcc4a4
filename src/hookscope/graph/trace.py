"""``module_graph(model, x) -> Graph``: which module fed which, found by hooks during one pass.

::

    graph = module_graph(model, x)                   # one forward pass, gradients recorded
    with Tracer(model) as tracer:                    # or inside a pass you run anyway (the report's)
        model(x)
    graph = tracer.graph()

A forward pre-hook and a forward hook on every module see each call: the call order, the module
each one ran inside (the boxes that nest), and its tensors. A module that ran no other module (a
*leaf*) maps its output tensors to itself, by identity (``id`` checked through a weak reference,
so nothing is kept alive); a later module that receives one of those objects gets an edge from
it (``via="tensor"``). Where a tensor got there through functional code (``a + b``, a reshape,
``out += identity``), the autograd graph it carries is walked back to the outputs of leaves
(``via="autograd"``): that is how residual joins show. Without gradients (``torch.no_grad``, or
nothing requires grad) only identity edges are found and ``Graph.note`` says so.

The same pass measures memory: a ``saved_tensors_hooks`` pair sees every tensor autograd keeps
for the backward and counts its storage's bytes once, for the module running when it was saved
(parameters and buffers are not counted: they are held anyway). ``Tracer`` records gradients
(``torch.enable_grad``) inside its block for that reason.

With ``exported=True``, ``torch.export`` also runs (``hookscope.graph.exported``): its data flow
gives the edges and its node names key Model Explorer's overlays; where it fails (dynamic
control flow, caches) the hooks' edges stay and a ``CaptureWarning`` says why.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ..core.compiled import named_modules
from ..core.hooks import HandleGroup
from ..core.modes import evaluating
from ..core.select import blocks
from ..core.tree import flatten, flatten_call
from . import picture  # noqa: F401  (registers a Graph's notebook view, .table() and .plot())
from .nodes import INPUT, OUTPUT, Edge, Graph, Node

OUTSIDE = "(outside)"  # who saved a tensor autograd kept outside every module's call
MAX_WALK = 10_000  # autograd nodes visited looking for one input's producers


@dataclass
class _Seen:
    type: str
    parent: str | None
    order: int
    calls: int = 0
    leaf: bool = True
    inputs: set[tuple[int, str]] = field(default_factory=set)  # its first call's input storages
    bytes_in: int = 0


class Tracer:
    """Hooks on every module of ``model`` inside a ``with`` block, removed in ``finally``; ``graph()`` after."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._names = {module: name for name, module in named_modules(model)}  # eager names, as capture's
        self._root = next(module for module, name in self._names.items() if name == "")
        self._handles = HandleGroup()
        self._stack: list[str] = []
        self._pending: dict[str, list[list[Tensor]]] = {}  # a running module's inputs, one list per call
        self._seen: dict[str, _Seen] = {}
        self._made: dict[int, tuple[weakref.ref[Tensor], str]] = {}  # id(tensor) -> (the tensor, its producer)
        self._fns: dict[Any, str] = {}  # autograd node of a leaf's output -> the leaf
        self._edges: dict[tuple[str, str], str] = {}
        self._savers: dict[tuple[int, str], list[str]] = {}  # a saved storage -> the modules that saved it, in order
        self._sizes: dict[tuple[int, str], int] = {}
        self._held: set[int] = set()
        self._context = contextlib.ExitStack()

    def __enter__(self) -> Tracer:
        try:
            for module, name in self._names.items():
                self._handles.on_forward_pre(module, self._before(name))
                self._handles.on_forward(module, self._after(name))
            self._held = {p.untyped_storage().data_ptr() for p in [*self.model.parameters(), *self.model.buffers()]}
            self._context.enter_context(torch.enable_grad())
            self._context.enter_context(torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._context.close()
        finally:
            self._handles.remove()
            self._fns.clear()  # the autograd graph is not ours to keep

    def _before(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if self._stack:
                self._seen[self._stack[-1]].leaf = False
            tensors = [t for _, t in flatten_call(args, kwargs)]
            seen = self._seen.get(name)
            if seen is None:
                parent = self._stack[-1] if self._stack else (None if module is self._root else "")
                seen = self._seen[name] = _Seen(type(module).__name__, parent, len(self._seen))
                seen.inputs = {_key(t) for t in tensors if t.untyped_storage().data_ptr() not in self._held}
                seen.bytes_in = sum(
                    {_key(t): t.untyped_storage().nbytes() for t in tensors if _key(t) in seen.inputs}.values()
                )
            seen.calls += 1
            if module is self._root:
                for tensor in tensors:
                    self._made[id(tensor)] = (weakref.ref(tensor), INPUT)
            self._stack.append(name)
            self._pending.setdefault(name, []).append(tensors)

        return hook

    def _after(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            self._stack.pop()
            inputs = self._pending[name].pop()
            if output is None:  # its forward raised (always_call): nothing to link
                return
            outputs = [t for _, t in flatten(output)]
            if self._seen[name].leaf:
                for tensor in inputs:
                    self._link(tensor, name)
                for tensor in outputs:
                    self._made[id(tensor)] = (weakref.ref(tensor), name)
                    if tensor.grad_fn is not None:
                        self._fns[tensor.grad_fn] = name
            if module is self._root:
                for tensor in outputs:
                    self._link(tensor, OUTPUT)

        return hook

    def _link(self, tensor: Tensor, target: str) -> None:
        """Edges into ``target`` from whatever made ``tensor``: the leaf that returned it, and the leaves
        its autograd graph reaches through functional code (a join)."""
        made = self._made.get(id(tensor))
        source = made[1] if made is not None and made[0]() is tensor else None
        if source is not None:
            self._edges.setdefault((source, target), "tensor")
        if tensor.grad_fn is not None and (source is None or self._fns.get(tensor.grad_fn) != source):
            for producer in self._walk(tensor.grad_fn):
                if producer != source and producer != target:
                    self._edges.setdefault((producer, target), "autograd")

    def _walk(self, start: Any) -> Iterator[str]:
        """The leaves whose outputs ``start`` (an autograd node) was computed from, nearest first."""
        queue, visited = [start], {start}
        while queue and len(visited) < MAX_WALK:
            fn = queue.pop(0)
            if fn in self._fns:
                yield self._fns[fn]
                continue
            for following, _ in fn.next_functions:
                if following is not None and following not in visited:
                    visited.add(following)
                    queue.append(following)

    def _pack(self, tensor: Tensor) -> Tensor:
        key = _key(tensor)
        if key[0] not in self._held:
            self._savers.setdefault(key, []).append(self._stack[-1] if self._stack else OUTSIDE)
            self._sizes.setdefault(key, tensor.untyped_storage().nbytes())
        return tensor

    @property
    def saved(self) -> int:
        """Bytes saved for the backward during the block, each storage once, by modules or outside them."""
        return sum(self._sizes.values())

    def _saved_by(self) -> dict[str, int]:
        """Bytes per module (and ``OUTSIDE``), each storage counted for the first module that saved it."""
        by: dict[str, int] = {}
        for key, savers in self._savers.items():
            by[savers[0]] = by.get(savers[0], 0) + self._sizes[key]
        return by

    def _checkpoint(self, name: str) -> int:
        """Bytes checkpointing ``name`` frees: storages first saved inside it, not its inputs (checkpoint keeps
        them) and saved by no module outside it (the next module may save its output again)."""
        inside = _inside(name)
        inputs = self._seen[name].inputs
        return sum(
            self._sizes[key]
            for key, savers in self._savers.items()
            if key not in inputs and all(inside(saver) for saver in savers)
        )

    def graph(self) -> Graph:
        """What the block's passes showed, as a ``Graph`` (modules in the order their first call started)."""
        by = self._saved_by()
        nodes = tuple(
            Node(name, s.type, s.parent, s.order, s.calls, s.leaf, by.get(name, 0), s.bytes_in,
                 0 if s.leaf else self._checkpoint(name))
            for name, s in self._seen.items()
        )  # fmt: skip
        joins = any(via == "autograd" for via in self._edges.values())
        recorded = joins or bool(self._sizes)  # autograd saw the pass
        built = "hooks and autograd" if joins else "hooks"
        note = (
            "modules linked by tensor identity, joins through the autograd graph"
            if recorded
            else "modules linked by tensor identity only: no gradient was recorded (nothing required grad, or "
            "inference mode), so joins through functional code (residual adds) are not seen"
        )
        edges = tuple(Edge(s, t, via) for (s, t), via in self._edges.items())
        ran = {node.name for node in nodes}
        folded = tuple(name for name, _ in blocks(self._root) if name in ran)
        return Graph(type(self._root).__name__, nodes, edges, built, note, blocks=folded)


def _unpack(tensor: Tensor) -> Tensor:
    return tensor


def _key(tensor: Tensor) -> tuple[int, str]:
    """A tensor's storage, as the tracer counts saved bytes: its address and device."""
    return tensor.untyped_storage().data_ptr(), str(tensor.device)


def _inside(name: str) -> Any:
    """``saver -> bool``: whether a module named ``saver`` is ``name`` or runs inside it."""
    prefix = f"{name}." if name else ""
    return lambda saver: saver != OUTSIDE and (saver == name or saver.startswith(prefix))


def module_graph(model: nn.Module, x: Any, *, exported: bool = False) -> Graph:
    """The graph of ``model`` on ``x`` (a tensor, a tuple of arguments or a dict of keyword arguments):
    one forward pass in eval mode under a ``Tracer``, gradients recorded, nothing kept after.

    ``exported``: also run ``torch.export`` for its data flow and Model Explorer's node names
    (``hookscope.graph.exported``); where it fails the hooks' graph is returned and a warning says why.
    """
    args, kwargs = _arguments(x)
    with evaluating(model), Tracer(model) as tracer:
        model(*args, **kwargs)
    graph = tracer.graph()
    if exported:
        from .exported import with_export  # torch.export is imported only when asked for

        graph = with_export(graph, model, args, kwargs)
    return graph


def _arguments(x: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(x, tuple):
        return x, {}
    if isinstance(x, dict):
        return (), dict(x)
    return (x,), {}
