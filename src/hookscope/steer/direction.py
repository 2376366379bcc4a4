"""What ``hookscope.directions`` returns: a ``Direction`` per site, and ``Directions``: all of them, with provenance.

::

    found = hookscope.directions("acts.hookscope", labels, groups=pair_ids, method="pca")
    found["fc1"].vector                 # unit * norm, in the site's shape: edits.add(found["fc1"].vector)
    print(found.table())                # per site: method, norm, held-out AUC, examples, groups
    found.save("honesty.safetensors")   # a plain safetensors file, provenance in its metadata
    found.to_steering_vector()          # steering-vectors' SteeringVector; .to_control_vector(): repeng's

A direction is a unit vector (``unit``) and a length (``norm``): the mean difference of the two
classes' training rows projected on the unit, so ``vector`` moves an example of class 0 by one
class-mean step along the direction. ``auc`` is the held-out separation: the area under the ROC
curve of the held-out rows' projections (0.5: none, 1: complete).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..base.display import Shows, plot_of, table_of
from ..base.files import new_output, write_atomically
from ..base.optional import require
from ..base.words import closest
from ..errors import NotCapturedError, StoreError
from . import interop

if TYPE_CHECKING:
    from PIL.Image import Image

FORMAT = "hookscope.directions"  # the safetensors metadata key that marks a file of Directions


@dataclass(frozen=True, eq=False)  # a tensor field: compare ``unit`` with torch.equal
class Direction:
    """One site's direction: a unit vector in the site's shape, its length and its held-out separation.

    Attributes:
        site: the site (module name) the rows came from.
        method: ``mean_difference``, ``pca``, ``logistic``, or where it was read from (``steering_vectors``,
            ``repeng``, ``safetensors``).
        unit: the direction, norm 1, shaped like one example of the site (float64).
        norm: the training classes' mean difference projected on ``unit``.
        auc: the area under the ROC curve of the held-out rows' projections (NaN when not measured).
        examples: (training rows, held-out rows).
        groups: the groups (pairs, images, sequences) the rows came from.
    """

    site: str
    method: str
    unit: Tensor
    norm: float
    auc: float = math.nan
    examples: tuple[int, int] = (0, 0)
    groups: int = 0

    @property
    def vector(self) -> Tensor:
        """``unit * norm``: the vector to add (``edits.add``), in the site's shape (float64)."""
        return self.unit * self.norm

    def __repr__(self) -> str:
        return f"<Direction {self.method} at {self.site!r}: norm {self.norm:.4g}, held-out AUC {self.auc:.3f}>"


class Directions(Mapping[str, Direction], Shows):
    """The directions of ``directions``, by site, and where they came from.

    Args:
        directions: site -> its ``Direction``, in the order the sites ran.
        provenance: what made them: the store (its path and manifest hash), sites, method, counts, seed.
    """

    def __init__(self, directions: Mapping[str, Direction], provenance: Mapping[str, Any] | None = None) -> None:
        self._directions = dict(directions)
        self.provenance: dict[str, Any] = dict(provenance or {})

    def __getitem__(self, site: str) -> Direction:
        if site not in self._directions:
            raise NotCapturedError(f"no direction at {site!r}; found at: {', '.join(self._directions)}"
                                   f"{closest(site, self._directions)}")  # fmt: skip
        return self._directions[site]

    def __iter__(self) -> Iterator[str]:
        return iter(self._directions)

    def __len__(self) -> int:
        return len(self._directions)

    def __repr__(self) -> str:
        method = self.provenance.get("method", "")
        return f"<Directions {method} at {len(self)} sites>" if method else f"<Directions at {len(self)} sites>"

    def vector(self, site: str) -> Tensor:
        """The vector (``unit * norm``) at ``site``, as ``steer_sweep`` and ``edits.add`` take it.

        Args:
            site: a site these directions hold.

        Returns:
            The vector, in the site's shape (float64).

        Raises:
            NotCapturedError: no direction at ``site`` (a ``KeyError``).
        """
        return self[site].vector

    def table(self) -> str:
        """A row per site: method, norm, held-out AUC, examples and groups; the provenance below.

        Returns:
            The table, as text.
        """
        return table_of(self)

    def plot(self) -> Image:
        """The held-out AUC per site, in order, 0.5 (no separation) dashed.

        Returns:
            A PIL image of the chart.

        Raises:
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        return plot_of(self)

    def save(self, out: str | os.PathLike[str], *, force: bool = False) -> Path:
        """Write the vectors (``unit * norm``) to a plain safetensors file, one tensor per site, float64;
        the norms, AUCs and provenance go in its metadata, so ``Directions.read`` gives them back.

        Args:
            out: the file written, whole or not at all.
            force: replace an existing file.

        Returns:
            The file's absolute path.

        Raises:
            OutputExistsError: ``out`` exists and ``force`` is False.
            MissingDependencyError: safetensors is not installed.
        """
        path = new_output(out, force=force, kind="directions file", file=True)
        save_file = require("safetensors.torch").save_file
        tensors = {site: d.vector.contiguous() for site, d in self.items()}
        meta = {site: [d.method, d.norm, d.auc, *d.examples, d.groups] for site, d in self.items()}
        metadata = {FORMAT: json.dumps({"directions": meta, "provenance": self.provenance})}
        write_atomically(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))
        return path

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Directions:
        """The directions of a safetensors file: one written by ``save`` whole, any other one tensor per site
        (its name the site, its length the norm).

        Args:
            path: the file.

        Returns:
            The directions, by tensor name.

        Raises:
            StoreError: the file cannot be read or holds a zero vector.
            MissingDependencyError: safetensors is not installed.
        """
        safe_open = require("safetensors").safe_open
        try:
            with safe_open(os.fspath(path), framework="pt") as file:
                tensors = {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118 (not a dict)
                saved = json.loads((file.metadata() or {}).get(FORMAT, "{}"))
        except (OSError, ValueError) as err:
            raise StoreError(f"cannot read the directions file {path}: {err}") from err
        meta = saved.get("directions", {})
        found = {site: _loaded(site, vector, meta.get(site), "safetensors") for site, vector in tensors.items()}
        return cls(found, saved.get("provenance", {"file": os.fspath(path)}))

    def to_steering_vector(self) -> Any:
        """steering-vectors' ``SteeringVector`` of these vectors (``unit * norm``), keyed by each site's block
        index (the number that ends its name: ``transformer.h.3`` is 3), ``layer_type="decoder_block"``.

        Returns:
            A ``steering_vectors.SteeringVector``.

        Raises:
            OptionError: a site's name does not end with a block number, or two sites share one.
            MissingDependencyError: steering-vectors is not installed.
        """
        vectors = interop.by_block({site: d.vector.float() for site, d in self.items()})
        return require("steering_vectors").SteeringVector(layer_activations=vectors, layer_type="decoder_block")

    def to_control_vector(self, model: Any = None) -> Any:
        """repeng's ``ControlVector`` of these vectors (``unit * norm``, float32 numpy), keyed by block index as
        ``to_steering_vector`` is.

        Args:
            model: a Hugging Face model or its ``model_type`` (``"gpt2"``), which repeng records; None: the
                store's model type, if known, else ``"unknown"``.

        Returns:
            A ``repeng.ControlVector``.

        Raises:
            OptionError: a site's name does not end with a block number, or two sites share one.
            MissingDependencyError: repeng is not installed.
        """
        vectors = interop.by_block({site: d.vector.float() for site, d in self.items()})
        kind = interop.model_type(model, self.provenance)
        control = require("repeng").ControlVector
        return control(model_type=kind, directions={block: v.numpy() for block, v in vectors.items()})

    @classmethod
    def from_steering_vector(cls, vector: Any, *, site: str) -> Directions:
        """The directions of a steering-vectors ``SteeringVector``.

        Args:
            vector: the ``SteeringVector``.
            site: the sites' names with ``{}`` for the block index (``"transformer.h.{}"``).

        Returns:
            One direction per block.

        Raises:
            OptionError: ``site`` holds no ``{}``.
            StoreError: a vector is zero.
        """
        found = interop.by_site(dict(vector.layer_activations), site)
        return cls({name: _loaded(name, v, None, "steering_vectors") for name, v in found.items()},
                   {"source": "steering_vectors", "layer_type": vector.layer_type})  # fmt: skip

    @classmethod
    def from_control_vector(cls, vector: Any, *, site: str) -> Directions:
        """The directions of a repeng ``ControlVector``.

        Args:
            vector: the ``ControlVector``.
            site: the sites' names with ``{}`` for the block index (``"model.layers.{}"``).

        Returns:
            One direction per block.

        Raises:
            OptionError: ``site`` holds no ``{}``.
            StoreError: a vector is zero.
        """
        found = interop.by_site({k: torch.as_tensor(v) for k, v in vector.directions.items()}, site)
        return cls({name: _loaded(name, v, None, "repeng") for name, v in found.items()},
                   {"source": "repeng", "model_type": vector.model_type})  # fmt: skip


def _loaded(site: str, vector: Tensor, meta: list[Any] | None, source: str) -> Direction:
    """A direction read back: ``meta`` (what ``save`` wrote) restores its method, norm and scores."""
    vector = vector.detach().cpu().double()
    norm = float(meta[1]) if meta else float(vector.norm())
    if not norm > 0 or not math.isfinite(norm):
        raise StoreError(f"the {source} vector of {site!r} has norm {norm}; a direction needs a nonzero finite vector")
    if meta is None:
        return Direction(site, source, vector / norm, norm)
    method, _, auc, train, test, groups = meta
    return Direction(site, method, vector / norm, norm, float(auc), (int(train), int(test)), int(groups))
