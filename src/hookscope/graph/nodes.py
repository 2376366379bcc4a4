"""``Graph``: the modules that ran in one pass, which fed which, and what each left saved for backward.

::

    graph = hookscope.module_graph(model, x)         # hookscope.graph.trace: one forward pass under hooks
    graph.leaves()                                    # the modules that ran nothing inside: the boxes drawn
    graph.colored(grad_norms, column="|grad|")      # the same graph, its boxes coloured by a number per site
    graph.saved_under("layer1.0")                     # bytes that block's forward left saved for the backward
    graph.node("layer1.0").checkpoint                  # of which torch.utils.checkpoint on it would free this

A ``Node`` is a call of a module (the model is ``""``). A module that ran once is one node named
as the module; a module that ran more than once in a pass (ResNet's ReLU, reused in each block,
EfficientNet's ``_swish``) has one node per call, named ``module#i`` with ``i`` the call's index
from 0, as in ``cap[module].calls[i]``: ``layer1.0.relu#0`` and ``layer1.0.relu#1``. So the graph
has no cycle, and each call has its own inputs. ``graph.calls_of("layer1.0.relu")`` lists them;
a value keyed by the module (``graph.colored({"layer1.0.relu": 2.0})``) colours each of its calls,
one keyed by a call colours that call. An ``Edge`` says a tensor went from one
node (or the model's ``"input"``) to another (or its ``"output"``): ``via="tensor"`` when the
output object itself was the input, ``via="autograd"`` when it got there through functional code
(an add, a reshape: a residual join), ``via="export"`` when ``torch.export``'s data flow said so.
``built`` says which way the edges were found. Drawing is ``hookscope.graph.svg`` (and
``picture``, which registers the notebook view, ``.table()`` and ``.plot()``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..base.deprecation import renamed, warn_renamed
from ..base.display import Shows, plot_of, table_of

if TYPE_CHECKING:
    from PIL.Image import Image

# the two ends of the data flow, beside the modules' names (not kinds: the model's input and output)
INPUT = "input"
OUTPUT = "output"
CALL = "#"  # "layer1.0.relu#1": call 1 (from 0) of a module that ran more than once


def call_name(module: str, call: int) -> str:
    """The node of call ``call`` (from 0) of a ``module`` that ran more than once: ``module#call``."""
    return f"{module}{CALL}{call}"


def split_name(name: str) -> tuple[str, int | None]:
    """``(module, call)`` of a node's name: ``("layer1.0.relu", 1)`` for ``layer1.0.relu#1``, ``(name, None)``
    for a module that ran once."""
    module, mark, call = name.rpartition(CALL)
    return (module, int(call)) if mark and call.isdigit() else (name, None)


@dataclass(frozen=True)
class Node:
    """A module's call in the pass: the module, or one of its calls when it ran more than once."""

    name: str  # its qualified name, "" the model; "name#i" for call i of a module that ran more than once
    type: str
    parent: str | None  # the node it ran inside ("" the model; None for the model itself)
    order: int  # when its call started (its first, over several passes), 0 for the model
    calls: int  # how many times its module ran in the block (each of its call nodes says the same)
    leaf: bool  # no other module ran inside its call
    saved: int = 0  # bytes its own ops left saved for the backward (its children's not included)
    inputs: int = 0  # bytes of the tensors its call received
    checkpoint: int = 0  # bytes torch.utils.checkpoint on it would free (0 for leaves)

    @property
    def module(self) -> str:
        """The module this node is a call of (its name without ``#i``)."""
        return split_name(self.name)[0]

    @property
    def call(self) -> int | None:
        """Which call of its module this node is (from 0), None for a module that ran once."""
        return split_name(self.name)[1]


@dataclass(frozen=True)
class Edge:
    """A tensor going from ``source`` to ``target`` (module names, ``input`` or ``output``)."""

    source: str
    target: str
    via: str  # "tensor", "autograd" (through functional code: a join) or "export"


@dataclass(frozen=True)
class Graph(Shows):
    """The modules of one pass, their data flow, and optionally a number per module to colour them by.

    Attributes:
        model: the model's class name.
        nodes: one ``Node`` per module that ran once, and one per call (``module#i``) of a module that
            ran more than once, in call order.
        edges: the data flow between them.
        built: ``hooks``, ``hooks and autograd`` or ``torch.export``.
        note: why it was built that way.
        blocks: the repeated blocks, drawn folded.
        overlay: node name (a module, or one call ``module#i``) -> the number it is coloured by.
        column: what the overlay's numbers are: the table's column, the legend's name.
        export_ids: module -> its ``torch.export`` node names.
    """

    model: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    built: str  # "hooks", "hooks and autograd" or "torch.export"
    note: str  # why it was built that way
    blocks: tuple[str, ...] = ()  # repeated blocks (core.select.blocks), drawn folded
    overlay: Mapping[str, float] = field(default_factory=dict)  # module name -> the number it is coloured by
    column: str = ""  # what the overlay's numbers are: the column they fill in the table, the legend's name
    export_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # module -> torch.export node names

    def __repr__(self) -> str:
        coloured = f", coloured by {self.column}" if self.overlay else ""
        modules, calls = len({node.module for node in self.nodes}), len(self.nodes)
        ran = f"{modules} modules" + (f" in {calls} calls" if calls != modules else "")
        return f"<Graph {self.model}: {ran}, {len(self.edges)} edges, by {self.built}{coloured}>"

    def node(self, name: str) -> Node:
        """The node ``name``: a module that ran once, or one call, ``module#i``, of a module that ran more.

        Args:
            name: a module's dotted name, or ``module#i`` for call ``i`` of a module that ran more than once.

        Returns:
            Its ``Node``.

        Raises:
            KeyError: no node has that name (the message lists a module's call nodes when it ran several times).
        """
        found = self._by_name.get(name)
        if found is None:
            calls = [node.name for node in self.calls_of(name)]
            raise KeyError(f"{name!r} ran {len(calls)} times: its nodes are {calls}" if calls else name)
        return found

    @functools.cached_property
    def _by_name(self) -> dict[str, Node]:
        return {node.name: node for node in self.nodes}

    @functools.cached_property
    def _children(self) -> dict[str | None, list[str]]:
        """Each node's name -> the nodes that ran directly inside it, in call order."""
        children: dict[str | None, list[str]] = {}
        for node in sorted(self.nodes, key=lambda n: n.order):
            children.setdefault(node.parent, []).append(node.name)
        return children

    def calls_of(self, name: str) -> list[Node]:
        """The nodes of module ``name``: itself, or one per call (``name#0``, ``name#1``...) in call order.

        Args:
            name: a module's dotted name.

        Returns:
            Its ``Node`` objects, in call order; empty when it never ran.
        """
        return [node for node in self.nodes if node.module == name]

    def leaves(self) -> list[Node]:
        """The calls that ran no other module, in call order: the boxes of the drawing.

        Returns:
            Their ``Node`` objects.
        """
        return [node for node in self.nodes if node.leaf]

    def under(self, name: str) -> list[Node]:
        """``name`` and every node that ran inside it (by ``parent``, so a call's own children only).

        Args:
            name: a node's name (``""``: the model; ``module#i``: one call).

        Returns:
            Its node and those of every call inside it, in call order.
        """
        names, seen = [name], {name}
        for inside in names:  # grows as it goes: breadth first
            for child in self._children.get(inside, []):
                if child not in seen:
                    seen.add(child)
                    names.append(child)
        return sorted((self._by_name[n] for n in names if n in self._by_name), key=lambda node: node.order)

    def saved_under(self, name: str) -> int:
        """Bytes the forward of ``name`` and everything inside it left saved for the backward.

        Args:
            name: a node's name (``""``: the model; ``module#i``: one call).

        Returns:
            The bytes saved for the backward by it and every call inside it.
        """
        return sum(node.saved for node in self.under(name))

    @renamed(measure="column")
    def colored(self, overlay: Mapping[str, float], *, column: str = "value") -> Graph:
        """This graph with its boxes coloured by ``overlay`` (module name, or a call's ``module#i``, -> number;
        see ``graph.overlay``); a module's value colours each of its calls. ``column`` names the numbers
        (``measure=``, its old name, is ``compare.cka``'s CKA or RSA).

        Args:
            overlay: node name (a module, or one call ``module#i``) -> the number its box is coloured by.
            column: what the numbers are: the table's column and the legend's name (``measure=`` is its old name).

        Returns:
            A new ``Graph``; this one is unchanged.
        """
        return dataclasses.replace(self, overlay={str(k): float(v) for k, v in overlay.items()}, column=column)

    @property
    def measure(self) -> str:
        """The old name of ``column`` (one release)."""
        warn_renamed("Graph.measure", "Graph.column")
        return self.column

    def value(self, name: str) -> float | None:
        """The overlay's number for node ``name``: its own, else its module's, else None.

        Args:
            name: a node's name.

        Returns:
            The number, or None when the overlay has none for it.
        """
        if name in self.overlay:
            return self.overlay[name]
        return self.overlay.get(split_name(name)[0])

    def as_dict(self) -> dict[str, Any]:
        """The graph as JSON-ready data (what a store keeps in its manifest); ``from_dict`` reads it back.

        Returns:
            A dict of plain lists and strings.
        """
        return {
            "model": self.model, "built": self.built, "note": self.note, "blocks": list(self.blocks),
            "nodes": [dataclasses.astuple(node) for node in self.nodes],
            "edges": [dataclasses.astuple(edge) for edge in self.edges],
            "export_ids": {k: list(v) for k, v in self.export_ids.items()},
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Graph:
        """The graph ``as_dict`` wrote (without its overlay).

        Args:
            data: what ``as_dict`` returned (a store's manifest keeps it).

        Returns:
            The ``Graph``, without an overlay.
        """
        return cls(
            model=str(data["model"]),
            nodes=tuple(Node(*row) for row in data["nodes"]),
            edges=tuple(Edge(*row) for row in data["edges"]),
            built=str(data["built"]),
            note=str(data["note"]),
            blocks=tuple(data.get("blocks", ())),
            export_ids={k: tuple(v) for k, v in data.get("export_ids", {}).items()},
        )

    def table(self) -> str:
        """A row per module: type, calls, saved bytes (its own and inside it), and the overlay's value.

        Returns:
            The table, as text.
        """
        return table_of(self)

    def plot(self) -> Image:
        """The overview as a picture (PIL), drawn from the SVG's layout (``hookscope.graph.picture``).

        Returns:
            A PIL image.

        Raises:
            MissingDependencyError: Pillow is not installed.
        """
        return plot_of(self)
