"""What ``probe`` returns: a ``Probe`` per site (its fit, its scores, its directions) and ``Probes``, all of them.

``probes.table()`` is a row per site (method, train and test metric, chance, examples, groups),
``probes.plot()`` the test metric against the sites in order (chance dashed), and in a notebook
the two show together. ``probes[site].direction`` is the probe's direction in the site's own shape,
for ``edits.add`` (steering) and ``edits.project_out``: one direction (``shape``) for two classes or
values, one per class (``(K, *shape)``, centred over the classes) for more.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..base.display import Shows, shows_as
from ..base.words import closest, columns, shorten
from ..errors import NotCapturedError
from ..viz.charts import figure_image, new_figure
from ..viz.fonts import FONT, TITLE
from ..viz.fragments import Safe, image_tag, note, table, view
from .fit import LinearFit, accuracy, r2

if TYPE_CHECKING:
    from PIL.Image import Image


@dataclass(frozen=True)
class Probe:
    """One site's probe: ``method``'s fit, its train and test metric, and the chance level beside."""

    site: str
    method: str  # logistic, ridge or mean_difference
    fit: LinearFit
    shape: tuple[int, ...]  # of one example: (D,), (C, H, W), ...
    train: float
    test: float
    chance: float  # the test split's largest class share; 0 for R^2
    examples: tuple[int, int]  # (train, test)
    groups: int

    @property
    def metric(self) -> str:
        return "r2" if self.method == "ridge" else "accuracy"

    @property
    def direction(self) -> Tensor:
        """The probe's direction(s) in the raw activations, shaped like one example (float64)."""
        weight = self.fit.weight.T  # (K, D)
        if weight.shape[0] == 2:
            weight = weight[1:] - weight[:1]
        elif weight.shape[0] > 2:
            weight = weight - weight.mean(dim=0, keepdim=True)
        return weight.reshape(-1, *self.shape)[0] if weight.shape[0] == 1 else weight.reshape(-1, *self.shape)

    def score(self, activations: Tensor, labels: Tensor) -> float:
        """The probe's metric on other activations of this site, reduced as they were for the fit
        (``reduce=``): (N, *shape), or (B, T, D) tokens with labels per token or per sequence."""
        x = activations.detach().cpu().double().reshape(-1, int(torch.tensor(self.shape).prod()))
        y = torch.as_tensor(labels).reshape(-1)
        if len(y) != len(x):
            y = y.repeat_interleave(len(x) // max(len(y), 1))
        return (r2 if self.method == "ridge" else accuracy)(self.fit.predict(x), y)

    def __repr__(self) -> str:
        return f"<Probe {self.method} at {self.site!r}: {self.metric} {self.test:.3f} (chance {self.chance:.3f})>"


class Probes(Mapping[str, Probe], Shows):
    """The probes of ``probe``, by site, in the order the sites ran.

    Args:
        probes: site -> its fitted ``Probe``, in the order the sites ran.
    """

    def __init__(self, probes: Mapping[str, Probe]) -> None:
        self._probes = dict(probes)

    def __getitem__(self, site: str) -> Probe:
        if site not in self._probes:
            raise NotCapturedError(f"no probe at {site!r}; probed: {', '.join(self._probes)}"
                                   f"{closest(site, self._probes)}")  # fmt: skip
        return self._probes[site]

    def __iter__(self) -> Iterator[str]:
        return iter(self._probes)

    def __len__(self) -> int:
        return len(self._probes)

    def __repr__(self) -> str:
        best = max(self._probes.values(), key=lambda p: p.test, default=None)
        top = f", best {best.site!r} {best.metric} {best.test:.3f}" if best is not None else ""
        return f"<Probes at {len(self)} sites{top}>"

    def table(self) -> str:
        """A row per site: method, train and test metric, chance, examples and groups.

        Returns:
            The table, as text.
        """
        return "\n".join(columns([list(HEADER), *map(_cells, self.values())], right=range(2, len(HEADER))))

    def plot(self) -> Image:
        """The test metric per site, in order (chance dashed): how linearly readable the labels are by depth.

        Returns:
            A PIL image of the chart.

        Raises:
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        probes = list(self.values())
        fig = new_figure(max(3.5, 0.55 * len(probes) + 1.5), 2.8)
        ax = fig.add_subplot()
        steps = range(len(probes))
        ax.plot(steps, [p.test for p in probes], marker="o", label="test")
        ax.plot(steps, [p.train for p in probes], marker=".", alpha=0.5, label="train")
        ax.plot(steps, [p.chance for p in probes], linestyle="--", color="grey", label="chance")
        ax.set_xticks(list(steps), [shorten(p.site) for p in probes], rotation=45, ha="right", fontsize=FONT)
        ax.set_ylabel(probes[0].metric if probes else "")
        ax.set_title("linear probe by site", fontsize=TITLE)
        ax.legend(fontsize=FONT)
        return figure_image(fig)


HEADER = ("site", "method", "train", "test", "chance", "examples", "groups")


def _cells(p: Probe) -> list[str]:
    return [p.site, p.method, f"{p.train:.3f}", f"{p.test:.3f}", f"{p.chance:.3f}",
            f"{p.examples[0]:,}+{p.examples[1]:,}", f"{p.groups:,}"]  # fmt: skip


@shows_as(Probes, section=lambda probes: ("probes", "Linear probes by site"))
def probes_html(probes: Probes) -> Safe:
    """The plot and the table of the probes, one self-contained block."""
    rows = [_cells(p) for p in probes.values()]
    body = Safe(image_tag(probes.plot(), alt="probe metric by site", width=None) + table(HEADER, rows,
                numeric=range(2, len(HEADER))))  # fmt: skip
    split = "train and test split by group (image or sequence): no group on both sides"
    return view(body + note(split), title=f"Linear probes at {len(probes)} sites")
