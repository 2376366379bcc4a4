"""How a ``Faithfulness`` shows itself: a text table, the curves, a notebook view and a report section.

matplotlib and Pillow are imported when a picture is drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base.display import shows_as
from ..base.words import columns
from ..viz.charts import figure_image, new_figure
from ..viz.fonts import FONT, TITLE
from ..viz.fragments import Safe, image_tag, note, table, view
from .result import Faithfulness

if TYPE_CHECKING:
    from PIL.Image import Image

ORDER = ("deletion AUC", "insertion AUC", "ROAD MoRF", "ROAD LeRF", "ROAD", "drop", "increase")


def _header(result: Faithfulness) -> list[str]:
    present = {column for found in result.values() for column in found.means()}
    return [column for column in ORDER if column in present]


def _rows(result: Faithfulness) -> list[list[str]]:
    header = _header(result)
    rows = []
    for name, found in result.items():
        means = found.means()
        rows.append([name, *(f"{means[c]:.4f}" if c in means else "" for c in header)])
    return rows


def faithfulness_table(result: Faithfulness) -> str:
    """A row per map (controls last), the mean of each metric over the batch; the remarks below."""
    header = ["map", *_header(result)]
    lines = columns([header, *_rows(result)], right=range(1, len(header)))
    said = f"{result.convention} convention, score: {result.score}, baseline: {result.baseline}, {result.steps} steps"
    return "\n".join([*lines, said, *result.remarks])


def faithfulness_plot(result: Faithfulness) -> Image:
    """Deletion (left) and insertion (right) curves, each map's mean over the batch; controls dashed."""
    fig = new_figure(9.0, 3.4)
    axes = fig.subplots(1, 2, sharey=True)
    fractions = result.fractions.numpy()
    for ax, curve, title in ((axes[0], "deletion", "Deletion (lower is better)"),
                             (axes[1], "insertion", "Insertion (higher is better)")):  # fmt: skip
        for name, found in result.items():
            values = getattr(found, curve)
            if values is None:
                continue
            style = "--" if found.control else "-"
            ax.plot(fractions, values.float().mean(dim=0).numpy(), style, label=name, linewidth=1.5)
        ax.set_title(title, fontsize=TITLE)
        ax.set_xlabel("fraction of the input perturbed", fontsize=FONT)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(result.score, fontsize=FONT)
    axes[1].legend(fontsize=FONT, loc="best")
    return figure_image(fig)


def _place(result: Faithfulness) -> tuple[str, str]:
    return "faithfulness", "Is the map faithful?"


@shows_as(Faithfulness, table=faithfulness_table, plot=faithfulness_plot, section=_place)
def faithfulness_html(result: Faithfulness) -> Safe:
    """The curves, the table and the remarks, one self-contained block."""
    header = ["map", *_header(result)]
    body = Safe("")
    if any(found.deletion is not None or found.insertion is not None for found in result.values()):
        body = image_tag(result.plot(), alt="deletion and insertion curves", width=None)
    body = Safe(body + table(header, _rows(result), numeric=range(1, len(header))))
    said = f"{result.convention} convention; score: {result.score}; baseline: {result.baseline}; {result.steps} steps"
    for remark in result.remarks:
        body = Safe(body + note(remark))
    return view(body + note(said), title=f"Faithfulness of {len(result)} maps (controls included)")
