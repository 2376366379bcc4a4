"""``Graph``: the modules that ran in one pass, which fed which, and what each left saved for backward.

::

    graph = hookscope.module_graph(model, x)         # hookscope.graph.trace: one forward pass under hooks
    graph.leaves()                                    # the modules that ran nothing inside: the boxes drawn
    graph.colored(grad_norms, measure="|grad|")      # the same graph, its boxes coloured by a number per site
    graph.saved_under("layer1.0")                     # bytes that block's forward left saved for the backward
    graph.node("layer1.0").checkpoint                  # of which torch.utils.checkpoint on it would free this

A ``Node`` is a module that ran (the model is ``""``), an ``Edge`` says a tensor went from one
module (or the model's ``"input"``) to another (or its ``"output"``): ``via="tensor"`` when the
output object itself was the input, ``via="autograd"`` when it got there through functional code
(an add, a reshape: a residual join), ``via="export"`` when ``torch.export``'s data flow said so.
``built`` says which way the edges were found. Drawing is ``hookscope.graph.svg`` (and
``picture``, which registers the notebook view, ``.table()`` and ``.plot()``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.display import Shows, plot_of, table_of

# the two ends of the data flow, beside the modules' names (not kinds: the model's input and output)
INPUT = "input"
OUTPUT = "output"


@dataclass(frozen=True)
class Node:
    """A module that ran in the pass."""

    name: str  # its qualified name; "" is the model
    type: str
    parent: str | None  # the module it ran inside ("" the model; None for the model itself)
    order: int  # when its first call started, 0 for the model
    calls: int
    leaf: bool  # no other module ran inside its calls
    saved: int = 0  # bytes its own ops left saved for the backward (its children's not included)
    inputs: int = 0  # bytes of the tensors its first call received
    checkpoint: int = 0  # bytes torch.utils.checkpoint on it would free (0 for leaves)


@dataclass(frozen=True)
class Edge:
    """A tensor going from ``source`` to ``target`` (module names, ``input`` or ``output``)."""

    source: str
    target: str
    via: str  # "tensor", "autograd" (through functional code: a join) or "export"


@dataclass(frozen=True)
class Graph(Shows):
    """The modules of one pass, their data flow, and optionally a number per module to colour them by."""

    model: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    built: str  # "hooks", "hooks and autograd" or "torch.export"
    note: str  # why it was built that way
    blocks: tuple[str, ...] = ()  # repeated blocks (core.select.blocks), drawn folded
    overlay: Mapping[str, float] = field(default_factory=dict)  # module name -> the number it is coloured by
    measure: str = ""  # what the overlay's numbers are
    export_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # module -> torch.export node names

    def __repr__(self) -> str:
        coloured = f", coloured by {self.measure}" if self.overlay else ""
        return f"<Graph {self.model}: {len(self.nodes)} modules, {len(self.edges)} edges, by {self.built}{coloured}>"

    def node(self, name: str) -> Node:
        """The node of module ``name``."""
        return self._by_name()[name]

    def _by_name(self) -> dict[str, Node]:
        return {node.name: node for node in self.nodes}

    def leaves(self) -> list[Node]:
        """The modules that ran no other module, in call order: the boxes of the drawing."""
        return [node for node in self.nodes if node.leaf]

    def under(self, name: str) -> list[Node]:
        """``name`` and every module that ran inside it."""
        prefix = f"{name}." if name else ""
        return [node for node in self.nodes if node.name == name or node.name.startswith(prefix)]

    def saved_under(self, name: str) -> int:
        """Bytes the forward of ``name`` and everything inside it left saved for the backward."""
        return sum(node.saved for node in self.under(name))

    def colored(self, overlay: Mapping[str, float], *, measure: str = "value") -> Graph:
        """This graph with its boxes coloured by ``overlay`` (module name -> number; see ``graph.overlay``)."""
        return dataclasses.replace(self, overlay={str(k): float(v) for k, v in overlay.items()}, measure=measure)

    def as_dict(self) -> dict[str, Any]:
        """The graph as JSON-ready data (what a store keeps in its manifest); ``from_dict`` reads it back."""
        return {
            "model": self.model, "built": self.built, "note": self.note, "blocks": list(self.blocks),
            "nodes": [dataclasses.astuple(node) for node in self.nodes],
            "edges": [dataclasses.astuple(edge) for edge in self.edges],
            "export_ids": {k: list(v) for k, v in self.export_ids.items()},
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Graph:
        """The graph ``as_dict`` wrote (without its overlay)."""
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
        """A row per module: type, calls, saved bytes (its own and inside it), and the overlay's value."""
        return table_of(self)

    def plot(self) -> Any:
        """The overview as a picture (PIL), drawn from the SVG's layout (``hookscope.graph.picture``)."""
        return plot_of(self)
