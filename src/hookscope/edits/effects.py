"""The result of ``patch_sweep``: restored fractions by site (and position), as a table and a heatmap.

``PatchSweep.restored[site]`` is a float, or a list of floats (one per token position);
``table()`` is text, ``plot()`` a PIL heatmap (sites down, positions across, diverging colours
centred on 0: red restores, blue makes it worse), and in a notebook the sweep shows itself as both.
matplotlib and Pillow are imported when the heatmap is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..base.display import Shows, shows_as
from ..base.words import closest, columns, shorten
from ..errors import NotCapturedError, OptionError
from ..viz.charts import figure_image, new_figure
from ..viz.fonts import FONT, TITLE
from ..viz.fragments import Safe, image_tag, note, table, view

if TYPE_CHECKING:
    from PIL.Image import Image


@dataclass(frozen=True)
class PatchSweep(Shows):
    """Per site, the fraction of the metric's clean-minus-corrupted gap that patching it restored.

    Attributes:
        restored: site -> the fraction of ``metric_clean - metric_corrupt`` that patching it gave
            back (1: all of it, 0: none), or one fraction per position for a token site.
        metric_clean: the target on the clean input.
        metric_corrupt: the target on the corrupted input.
        patched: site -> the target of the patched run(s), like ``restored``.
        forwards: forward passes the sweep ran, clean and corrupted included.
    """

    restored: dict[str, float | list[float]]  # site -> fraction, or one fraction per position
    metric_clean: float
    metric_corrupt: float
    patched: dict[str, float | list[float]]  # site -> the metric of the patched run(s)
    forwards: int  # forward passes the sweep ran (clean and corrupted included)

    @classmethod
    def made(cls, values: Mapping[Any, float], clean: float, corrupt: float, *, forwards: int) -> PatchSweep:
        """From ``{unit: metric}`` (units with ``site`` and ``position``), in the units' order.

        Args:
            values: unit (with ``site`` and ``position``, None for a whole activation) -> the patched metric.
            clean: the metric on the clean input.
            corrupt: the metric on the corrupted input.
            forwards: forward passes run.

        Returns:
            The ``PatchSweep``, sites in the units' order.
        """
        patched: dict[str, Any] = {}
        for unit, value in values.items():
            if unit.position is None:
                patched[unit.site] = value
            else:
                patched.setdefault(unit.site, []).append(value)
        gap = clean - corrupt

        def fraction(m: Any) -> Any:
            return [(v - corrupt) / gap for v in m] if isinstance(m, list) else (m - corrupt) / gap

        return cls({s: fraction(m) for s, m in patched.items()}, clean, corrupt, patched, forwards)

    def __repr__(self) -> str:
        clean, corrupt = self.metric_clean, self.metric_corrupt
        return f"<PatchSweep of {len(self.restored)} sites, metric clean {clean:.4g}, corrupted {corrupt:.4g}>"

    def fraction(self, site: str, position: int | None = None) -> float:
        """The restored fraction at ``site`` (and ``position`` for a token site).

        Args:
            site: a swept site's name.
            position: the position, for a site patched per position; None for a whole-activation site.

        Returns:
            The restored fraction.

        Raises:
            NotCapturedError: ``site`` was not swept, or ``position`` is missing or out of range.
        """
        if site not in self.restored:
            hint = closest(str(site), self.restored)
            raise NotCapturedError(f"{site!r} is not a site of this sweep ({len(self.restored)} sites{hint}); "
                                   "list them with list(sweep.restored)")  # fmt: skip
        value = self.restored[site]
        if isinstance(value, list):
            if not isinstance(position, int) or not -len(value) <= position < len(value):
                got = "no position" if position is None else f"position={position!r}"
                last = len(value) - 1
                raise NotCapturedError(f"{site!r} was patched per position, got {got}; pass position= (0 to {last})")
            return value[position]
        return value

    @property
    def positions(self) -> int:
        """The most positions of any site (0 when no site was patched per position)."""
        return max((len(v) for v in self.restored.values() if isinstance(v, list)), default=0)

    def table(self) -> str:
        """Site by site (position across for token sites): the restored fraction, as text.

        Returns:
            The table, as text.
        """
        width = self.positions
        header = ["site", "restored"] if not width else ["site", *(f"pos {p}" for p in range(width))]
        rows = [header] + [[site, *_cells(value, width)] for site, value in self.restored.items()]
        return "\n".join([*columns(rows, right=range(1, len(header))), _gap(self)])

    def plot(self, *, labels: Sequence[str] | None = None, cmap: str = "RdBu_r") -> Image:
        """A heatmap: sites down, positions across (one column for whole-activation sites), each
        cell's fraction written on it; ``labels`` name the positions (the tokens).

        Args:
            labels: names of the positions (the tokens), one per column; None numbers them.
            cmap: the matplotlib colormap, spread over [-1, 1].

        Returns:
            A PIL RGB image of the heatmap.

        Raises:
            OptionError: ``labels`` does not name every position.
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        grid = self._grid()
        rows, cols = len(grid), len(grid[0])
        sites = [shorten(site) for site in self.restored]
        room = 0.075 * max(map(len, sites), default=0)  # inches the site names take at FONT points
        fig = new_figure(2.4 + room + 0.5 * cols, 0.9 + 0.3 * rows)
        ax = fig.add_subplot()
        shown = ax.imshow(grid, cmap=cmap, vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
        ax.set_yticks(range(rows), sites, fontsize=FONT)
        names = list(labels) if labels is not None else [str(p) for p in range(cols)]
        if self.positions and len(names) != cols:
            raise OptionError(f"labels= names the {cols} positions, got {len(names)} labels")
        ax.set_xticks(range(cols), names if self.positions else ["all"], fontsize=FONT)
        ax.set_xlabel("position" if self.positions else "")
        ax.set_title("restored fraction of the metric", fontsize=TITLE)
        for r in range(rows):
            for c in range(cols):
                if math.isfinite(grid[r][c]) and rows * cols <= 400:
                    colour = "white" if abs(grid[r][c]) > 0.6 else "black"
                    ax.text(c, r, _fixed(grid[r][c], 2), ha="center", va="center", fontsize=FONT, color=colour)
        fig.colorbar(shown, ax=ax, shrink=0.8)
        return figure_image(fig)

    def _grid(self) -> list[list[float]]:
        width = max(self.positions, 1)
        return [
            v + [math.nan] * (width - len(v)) if isinstance(v, list) else [v] + [math.nan] * (width - 1)
            for v in self.restored.values()
        ]


def _gap(sweep: PatchSweep) -> str:
    clean, corrupt = sweep.metric_clean, sweep.metric_corrupt
    return f"metric: clean {clean:.4g}, corrupted {corrupt:.4g}; {sweep.forwards} forward passes"


def _cells(value: float | list[float], width: int) -> list[str]:
    values = value if isinstance(value, list) else [value]
    return [_fixed(v, 3) for v in values] + [""] * (max(width, 1) - len(values))


def _fixed(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals; a tiny negative is ``0.00``, not ``-0.00``."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


@shows_as(PatchSweep, section=lambda sweep: ("patching", "Patch sweep"))
def patch_sweep_html(sweep: PatchSweep) -> Safe:
    """The heatmap and the table of a sweep, one self-contained block."""
    width = sweep.positions
    header = ["site", "restored"] if not width else ["site", *(f"pos {p}" for p in range(width))]
    rows = [[site, *_cells(value, width)] for site, value in sweep.restored.items()]
    body = image_tag(sweep.plot(), alt="restored fraction by site", width=None)
    body = Safe(body + table(header, rows, numeric=range(1, len(header))))
    gap = (
        f"metric: clean {sweep.metric_clean:.4g}, corrupted {sweep.metric_corrupt:.4g}; {sweep.forwards} forward passes"
    )
    return view(body + note(gap), title=f"Patch sweep over {len(sweep.restored)} sites")
