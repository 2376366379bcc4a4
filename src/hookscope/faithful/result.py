"""What ``hookscope.faithfulness`` measured: per map, its curves and numbers, beside its controls.

``Faithfulness`` maps each map's name to a ``MapScores``; the controls (``random control``, ``edge
control``) are entries of their own with ``control=True``. ``remarks`` says in words which map is
no better than its random control, and what was left out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torch import Tensor

from ..base.display import Shows, plot_of, table_of

if TYPE_CHECKING:
    from PIL.Image import Image


@dataclass
class MapScores:
    """One map's numbers, one value per image (or sequence) of the batch.

    ``deletion``, ``insertion``: (B, P) score curves over ``Faithfulness.fractions``; their areas
    ``deletion_auc`` and ``insertion_auc`` (B,) (lower deletion and higher insertion: more faithful).
    ``road_morf``, ``road_lerf`` (B,): the score change when the most (least) relevant pixels are
    imputed, averaged over the percentiles; ``road``: ``(lerf - morf) / 2`` (higher: more faithful).
    ``drop``, ``increase`` (B,): the confidence change when the input is multiplied by the map.
    A metric not measured is None.

    Attributes:
        name: the map's name (a key of the maps given, or ``random`` / ``edges`` for a control).
        control: True for a random or edge control map.
        deletion: ``(B, P)`` score after deleting each fraction of the most relevant positions.
        insertion: ``(B, P)`` score after inserting each fraction of them into the baseline.
        deletion_auc: ``(B,)`` area under ``deletion`` (lower: more faithful).
        insertion_auc: ``(B,)`` area under ``insertion`` (higher: more faithful).
        road_morf: ``(B,)`` score change with the most relevant pixels imputed.
        road_lerf: ``(B,)`` score change with the least relevant pixels imputed.
        road: ``(B,)`` ``(lerf - morf) / 2`` (higher: more faithful).
        drop: ``(B,)`` ``max(0, y - o)``: the score lost when the input is multiplied by the map.
        increase: ``(B,)`` 1.0 where that score rose (``o > y``), else 0.0.
    """

    name: str
    control: bool = False
    deletion: Tensor | None = None
    insertion: Tensor | None = None
    deletion_auc: Tensor | None = None
    insertion_auc: Tensor | None = None
    road_morf: Tensor | None = None
    road_lerf: Tensor | None = None
    road: Tensor | None = None
    drop: Tensor | None = None
    increase: Tensor | None = None

    def means(self) -> dict[str, float]:
        """Each measured number's mean over the batch, by column name.

        Returns:
            Column name (``deletion AUC``, ``ROAD``...) -> mean; the metrics not measured are left out.
        """
        columns = {
            "deletion AUC": self.deletion_auc, "insertion AUC": self.insertion_auc, "ROAD MoRF": self.road_morf,
            "ROAD LeRF": self.road_lerf, "ROAD": self.road, "drop": self.drop, "increase": self.increase,
        }  # fmt: skip
        return {k: float(v.float().mean()) for k, v in columns.items() if v is not None}


@dataclass
class Faithfulness(Mapping[str, MapScores], Shows):
    """Faithfulness of one or several maps of one batch: ``result["gradcam"].deletion_auc``.

    ``fractions`` (P,): the perturbed fraction at each point of the curves; ``convention``: whose
    numbers these are (``"hookscope"``, ``"torchcam"``, ``"grad-cam"``); ``score``: what the curves
    measure (``"probability"`` of the class, ``"logit"``, or ``"target"`` for a callable, scaled per
    image to [0, 1] under hookscope's convention); ``remarks``: maps no better than their random
    control, and metrics left out, in words.

    Attributes:
        scores: map name -> its ``MapScores``, controls included.
        fractions: ``(P,)`` the perturbed fraction at each point of the curves.
        convention: ``hookscope``, ``torchcam`` or ``grad-cam``.
        score: ``probability``, ``logit`` or ``target``.
        baseline: what replaced deleted positions, in words.
        steps: intervals of the deletion and insertion curves.
        remarks: maps no better than their random control, and metrics left out, in words.
    """

    scores: dict[str, MapScores]
    fractions: Tensor
    convention: str
    score: str
    baseline: str
    steps: int
    remarks: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> MapScores:
        return self.scores[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.scores)

    def __len__(self) -> int:
        return len(self.scores)

    def __repr__(self) -> str:
        maps = ", ".join(self.scores)
        return f"<Faithfulness of {maps} ({self.convention}, {self.score}, {self.steps} steps)>"

    def table(self) -> str:
        """A row per map (controls included): the mean of each metric over the batch (text).

        Returns:
            The table, as text, with the convention and the remarks below.
        """
        return table_of(self)

    def plot(self) -> Image:
        """Deletion and insertion curves of every map, its controls dashed (a PIL image).

        Returns:
            A PIL image of the two charts.

        Raises:
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        return plot_of(self)
