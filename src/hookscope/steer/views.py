"""How a ``SteerSweep`` shows itself: a text table, three charts, a notebook view and a report section.

matplotlib and Pillow are imported when a picture is drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base.display import shows_as
from ..base.words import columns
from ..viz.charts import figure_image, new_figure
from ..viz.fragments import Safe, image_tag, note, table, view
from .result import SteerSweep

if TYPE_CHECKING:
    from PIL.Image import Image

HEADER = ("scale", "propensity", "spread", "KL (neutral)", "calls edited", "forward passes")


def _rows(sweep: SteerSweep) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for i, scale in enumerate(sweep.scales.tolist()):
        column = sweep.propensity[:, i]
        spread = float(column.std()) if len(column) > 1 else 0.0
        kl = "" if sweep.kl is None else f"{float(sweep.kl[i]):.4g}"
        rows.append((f"{scale:g}", f"{float(column.mean()):.4f}", f"{spread:.4f}", kl,
                     str(sweep.edited[i]), str(sweep.forwards[i])))  # fmt: skip
    return rows


def _summary(sweep: SteerSweep) -> str:
    anti = int((sweep.slopes < 0).sum())
    return (
        f"steerability (mean slope) {sweep.steerability:.4f}, spread {sweep.spread:.4f}; "
        f"anti-steerable: {anti} of {len(sweep.propensity)} ({sweep.anti_steerable:.0%}); at {', '.join(sweep.sites)}"
    )


def steer_table(sweep: SteerSweep) -> str:
    """A row per scale: the mean propensity, its spread, the KL on the neutral prompts, calls edited and
    forward passes; below, the steerability, its spread and the anti-steerable examples."""
    lines = columns([HEADER, *_rows(sweep)], right=range(len(HEADER)))
    return "\n".join([*lines, _summary(sweep)])


def steer_plot(sweep: SteerSweep) -> Image:
    """Propensity over the scales (thin: each example; thick: the mean), the slopes' histogram, KL over the scales."""
    fig = new_figure(10.5, 3.2)
    axes = fig.subplots(1, 3)
    scales, propensity = sweep.scales.numpy(), sweep.propensity.numpy()
    slopes = sweep.slopes.numpy()
    for row, slope in zip(propensity, slopes, strict=True):
        axes[0].plot(scales, row, color="#d62728" if slope < 0 else "#1f77b4", alpha=0.25, linewidth=0.8)
    axes[0].plot(scales, propensity.mean(axis=0), color="black", linewidth=2.2, label="mean")
    axes[0].set(title="Propensity by scale", xlabel="scale", ylabel="propensity")
    axes[0].legend(fontsize=8, loc="best")
    axes[1].hist(slopes, bins=min(20, max(5, len(slopes) // 2)), color="#1f77b4")
    axes[1].axvline(0.0, color="#d62728", linewidth=1.2)
    axes[1].set(title=f"Slopes ({sweep.anti_steerable:.0%} below 0)", xlabel="slope", ylabel="examples")
    if sweep.kl is not None:
        axes[2].plot(scales, sweep.kl.numpy(), "o-", color="#2ca02c")
    axes[2].set(title="KL on neutral prompts" if sweep.kl is not None else "no neutral prompts",
                xlabel="scale", ylabel="KL (nats)")  # fmt: skip
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.title.set_fontsize(10)
    return figure_image(fig)


def _place(sweep: SteerSweep) -> tuple[str, str]:
    return "steering", "Does the steering work?"


@shows_as(SteerSweep, table=steer_table, plot=steer_plot, section=_place)
def steer_html(sweep: SteerSweep) -> Safe:
    """The three charts, the table per scale and the steerability, one self-contained block."""
    body = image_tag(sweep.plot(), alt="propensity by scale, the slopes' histogram, KL by scale", width=None)
    body = Safe(body + table(HEADER, _rows(sweep), numeric=range(len(HEADER))) + note(_summary(sweep)))
    title = f"Steering sweep: {len(sweep.propensity)} examples, {len(sweep.scales)} scales"
    return view(body, title=title)
