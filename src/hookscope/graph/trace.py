"""``module_graph(model, x) -> Graph``: which module fed which, found by hooks during one pass.

::

    graph = module_graph(model, x)                   # one forward pass, gradients recorded
    with Tracer(model) as tracer:                    # or inside a pass you run anyway (the report's)
        model(x)
    graph = tracer.graph()

A forward pre-hook and a forward hook on every module see each call: the call order, the call
each one ran inside (the boxes that nest), and its tensors. Each call is a node of its own: a
module that runs more than once in a pass (a ReLU reused in every ResNet block) gives
``relu#0``, ``relu#1``... (``hookscope.graph.nodes``), so the graph has no cycle. A call that ran
no other module (a *leaf*) maps its output tensors to itself, by identity (``id`` checked through
a weak reference, so nothing is kept alive); a later module that receives one of those objects
gets an edge from it (``via="tensor"``). Where a tensor got there through functional code (``a + b``, a reshape,
``out += identity``), the autograd graph it carries is walked back to the outputs of leaves
(``via="autograd"``): that is how residual joins show. The walk needs every tensor of the pass to
carry a ``grad_fn``, so the model runs on a copy of each float input that requires grad (made in
the model's forward pre-hook; the caller's tensor and every ``requires_grad`` flag stay as they
were): the edges are the same whether or not ``x`` requires grad, or the parameters do. Under
``torch.inference_mode``, or with only integer inputs into frozen layers, nothing records a
``grad_fn``: only identity edges are found and ``Graph.note`` says so.

The same pass measures memory: a ``saved_tensors_hooks`` pair sees every tensor autograd keeps
for the backward and counts its storage's bytes once, for the module running when it was saved
(parameters and buffers are not counted: they are held anyway). ``Tracer`` records gradients
(``torch.enable_grad``) inside its block for that reason.

``Tracer`` is a hook block (``hookscope.core.block``) like ``capture``: entered once (again raises
``BlockError``), every hook removed on any exception, and a compiled model runs eagerly inside it
(``hookscope.core.compiled.Eagerly``; no second warning when a capture beside it already said so).

With ``exported=True``, ``torch.export`` also runs (``hookscope.graph.exported``): its data flow
gives the edges and its node names key Model Explorer's overlays; where it fails (dynamic
control flow, caches) the hooks' edges stay and a ``CaptureWarning`` says why.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ..core.block import Block
from ..core.blocks import blocks
from ..core.compiled import Eagerly, named_modules
from ..core.diagnosis import annotate
from ..core.hooks import HandleGroup
from ..core.modes import evaluating
from ..core.tree import flatten, flatten_call
from . import picture  # noqa: F401  (registers a Graph's notebook view, .table() and .plot())
from .nodes import INPUT, OUTPUT, Edge, Graph, Node, call_name

OUTSIDE = "(outside)"  # who saved a tensor autograd kept outside every module's call
MAX_WALK = 10_000  # autograd nodes visited looking for one input's producers

Key = tuple[str, int]  # a call: its module's name and its index among that module's calls in the pass
THE_INPUT: Key = (INPUT, -1)
THE_OUTPUT: Key = (OUTPUT, -1)
NO_CALL: Key = (OUTSIDE, -1)
ROOT: Key = ("", 0)


@dataclass
class _Seen:
    type: str
    parent: Key | None
    order: int
    leaf: bool = True
    inputs: set[tuple[int, str]] = field(default_factory=set)  # its input storages (in its first pass)
    bytes_in: int = 0


class Tracer(Block):
    """Hooks on every module of ``model`` inside a ``with`` block (``hookscope.core.block``); ``graph()`` after."""

    noun, remake = "module graph tracer", "hookscope.graph.trace.Tracer(model)"

    def __init__(self, model: nn.Module) -> None:
        super().__init__(Eagerly(model, "module graph trace", quiet_when_held=True))
        self.model = model
        self._names = {module: name for name, module in named_modules(model)}  # eager names, as capture's
        self._root = next(module for module, name in self._names.items() if name == "")
        self._stack: list[tuple[Key, list[Tensor]]] = []  # the calls running, innermost last, with their inputs
        self._seen: dict[Key, _Seen] = {}
        self._calls: dict[str, int] = {}  # module -> its calls in the block
        self._in_pass: dict[str, int] = {}  # module -> its calls in the model's current pass
        self._made: dict[int, tuple[weakref.ref[Tensor], Key]] = {}  # id(tensor) -> (the tensor, its producer)
        self._fns: dict[Any, Key] = {}  # autograd node of a leaf's output (or of the input) -> that call
        self._edges: dict[tuple[Key, Key], str] = {}
        self._savers: dict[tuple[int, str], list[Key]] = {}  # a saved storage -> the calls that saved it, in order
        self._sizes: dict[tuple[int, str], int] = {}
        self._held: set[int] = set()
        self._raised: dict[int, Key] = {}  # id(exception) -> the call it escaped from first (innermost)
        self._context = contextlib.ExitStack()

    def _install(self, handles: HandleGroup) -> None:
        for module, name in self._names.items():
            handles.on_forward_pre(module, self._before(name))
            handles.on_forward(module, self._after(name))
        self._held = {p.untyped_storage().data_ptr() for p in [*self.model.parameters(), *self.model.buffers()]}
        self._context.enter_context(torch.enable_grad())
        self._context.enter_context(torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack))

    def _release(self) -> None:
        try:
            self._context.close()
        finally:
            self._stack.clear()
            self._made.clear()
            self._fns.clear()  # the autograd graph is not ours to keep

    def _finish(self, exc: BaseException | None) -> None:
        if exc is not None:
            annotate(exc, self._raised)  # "hookscope: raised inside module 'x' (call 0)", as capture says it

    def _before(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            root = module is self._root
            if root:  # a new pass: calls count from 0 again, and the model runs on inputs that record grad_fns
                self._in_pass.clear()
                args, kwargs = with_grad(args), with_grad(kwargs)
            tensors = [t for _, t in flatten_call(args, kwargs)]
            key = self._start(name, module, tensors)
            if root:
                for tensor in tensors:
                    self._made[id(tensor)] = (weakref.ref(tensor), THE_INPUT)
                    if tensor.grad_fn is not None:
                        self._fns[tensor.grad_fn] = THE_INPUT
            self._stack.append((key, tensors))
            return (args, kwargs) if root else None

        return hook

    def _start(self, name: str, module: nn.Module, tensors: list[Tensor]) -> Key:
        """The key of the call of ``module`` starting now, its record made in its first pass."""
        key = (name, self._in_pass.get(name, 0))
        self._in_pass[name] = key[1] + 1
        self._calls[name] = self._calls.get(name, 0) + 1
        if self._stack:
            self._seen[self._stack[-1][0]].leaf = False
        if key not in self._seen:
            parent = self._stack[-1][0] if self._stack else (None if module is self._root else ROOT)
            seen = self._seen[key] = _Seen(type(module).__name__, parent, len(self._seen))
            sizes = {_key(t): t.untyped_storage().nbytes() for t in tensors}
            seen.inputs = {k for k in sizes if k[0] not in self._held}
            seen.bytes_in = sum(sizes[k] for k in seen.inputs)
        return key

    def _after(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            key, inputs = self._stack.pop()
            if output is None:  # its forward raised (always_call): nothing to link, the module named
                raised = sys.exc_info()[1]
                if raised is not None:
                    self._raised.setdefault(id(raised), key)
                return
            outputs = [t for _, t in flatten(output)]
            if self._seen[key].leaf:
                for tensor in inputs:
                    self._link(tensor, key)
                for tensor in outputs:
                    self._made[id(tensor)] = (weakref.ref(tensor), key)
                    if tensor.grad_fn is not None:
                        self._fns[tensor.grad_fn] = key
            if module is self._root:
                for tensor in outputs:
                    self._link(tensor, THE_OUTPUT)

        return hook

    def _link(self, tensor: Tensor, target: Key) -> None:
        """Edges into ``target`` from whatever made ``tensor``: the leaf call that returned it, and the leaf
        calls its autograd graph reaches through functional code (a join)."""
        made = self._made.get(id(tensor))
        source = made[1] if made is not None and made[0]() is tensor else None
        if source is not None:
            self._edges.setdefault((source, target), "tensor")
        if tensor.grad_fn is not None and (source is None or self._fns.get(tensor.grad_fn) != source):
            for producer in self._walk(tensor.grad_fn):
                if producer != source and producer != target:
                    self._edges.setdefault((producer, target), "autograd")

    def _walk(self, start: Any) -> Iterator[Key]:
        """The leaf calls whose outputs ``start`` (an autograd node) was computed from, nearest first."""
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
            self._savers.setdefault(key, []).append(self._stack[-1][0] if self._stack else NO_CALL)
            self._sizes.setdefault(key, tensor.untyped_storage().nbytes())
        return tensor

    @property
    def saved(self) -> int:
        """Bytes saved for the backward during the block, each storage once, by modules or outside them."""
        return sum(self._sizes.values())

    def _saved_by(self) -> dict[Key, int]:
        """Bytes per call (and ``NO_CALL``), each storage counted for the first call that saved it."""
        by: dict[Key, int] = {}
        for key, savers in self._savers.items():
            by[savers[0]] = by.get(savers[0], 0) + self._sizes[key]
        return by

    def _checkpoint(self, call: Key) -> int:
        """Bytes checkpointing ``call`` frees: storages first saved inside it, not its inputs (checkpoint keeps
        them) and saved by no call outside it (the next module may save its output again)."""
        inputs = self._seen[call].inputs
        return sum(
            self._sizes[key]
            for key, savers in self._savers.items()
            if key not in inputs and all(self._within(saver, call) for saver in savers)
        )

    def _within(self, saver: Key | None, call: Key) -> bool:
        """Whether ``saver`` is ``call`` or ran inside it."""
        while saver is not None and saver != call:
            seen = self._seen.get(saver)
            saver = seen.parent if seen is not None else None
        return saver == call

    def graph(self) -> Graph:
        """What the block's passes showed, as a ``Graph`` (calls in the order they started)."""
        name = _namer({module for module, call in self._seen if call > 0})
        by = self._saved_by()
        nodes = tuple(
            Node(name(k), s.type, None if s.parent is None else name(s.parent), s.order, self._calls[k[0]], s.leaf,
                 by.get(k, 0), s.bytes_in, 0 if s.leaf else self._checkpoint(k))
            for k, s in self._seen.items()
        )  # fmt: skip
        joins = any(via == "autograd" for via in self._edges.values())
        recorded = joins or bool(self._sizes)  # autograd saw the pass
        built = "hooks and autograd" if joins else "hooks"
        note = (
            "modules linked by tensor identity, joins through the autograd graph"
            if recorded
            else "modules linked by tensor identity only: no gradient was recorded (inference mode, or integer "
            "inputs into frozen layers), so joins through functional code (residual adds) are not seen"
        )
        edges = tuple(Edge(name(s), name(t), via) for (s, t), via in self._edges.items())
        ran = {node.name for node in nodes}
        folded = tuple(block for block, _ in blocks(self._root) if block in ran)
        return Graph(type(self._root).__name__, nodes, edges, built, note, blocks=folded)


def _namer(repeated: set[str]) -> Any:
    """``key -> node name``: the module's name, or ``module#i`` for a module that ran more than once in a pass."""
    return lambda key: call_name(*key) if key[0] in repeated and key[1] >= 0 else key[0]


def with_grad(value: Any) -> Any:
    """``value`` with each float tensor in it (or in its tuples, lists and dicts) replaced by a copy that requires
    grad and carries a ``grad_fn``, so the autograd graph of the pass reaches back to it. A tensor that requires
    grad is copied with ``clone()`` (its gradient still flows to it); the caller's tensors are never changed.
    Under ``torch.inference_mode`` nothing is replaced (nothing is recorded there)."""
    if isinstance(value, Tensor):
        plain = not (value.is_floating_point() or value.is_complex())
        if plain or value.is_inference() or torch.is_inference_mode_enabled():
            return value
        return (value if value.requires_grad else value.detach().requires_grad_()).clone()
    if type(value) in (tuple, list):
        return type(value)(with_grad(item) for item in value)
    if type(value) is dict:
        return {k: with_grad(v) for k, v in value.items()}
    return value


def _unpack(tensor: Tensor) -> Tensor:
    return tensor


def _key(tensor: Tensor) -> tuple[int, str]:
    """A tensor's storage, as the tracer counts saved bytes: its address and device."""
    return tensor.untyped_storage().data_ptr(), str(tensor.device)


def module_graph(model: nn.Module, x: Any, *, exported: bool = False) -> Graph:
    """The graph of ``model`` on ``x`` (a tensor, a tuple of arguments or a dict of keyword arguments):
    one forward pass in eval mode under a ``Tracer``, gradients recorded on a copy of ``x`` (the same graph
    whether ``x`` requires grad or not; no flag of ``x`` or of the parameters changes), nothing kept after.

    ``exported``: also run ``torch.export`` for its data flow and Model Explorer's node names
    (``hookscope.graph.exported``); where it fails the hooks' graph is returned and a warning says why.

    Args:
        model: the network; it runs once in eval mode.
        x: its input: a tensor, a tuple of arguments or a dict of keyword arguments.
        exported: also run ``torch.export`` for its data flow and node names.

    Returns:
        The ``Graph`` of the pass.
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
