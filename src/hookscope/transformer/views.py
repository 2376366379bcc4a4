"""How a ``LinearAttention`` shows itself: a text table, a picture, a notebook view and a report section.

matplotlib and Pillow are imported when a picture is drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from ..base.display import shows_as
from ..base.words import columns
from ..errors import OptionError
from ..viz.charts import figure_image, new_figure
from ..viz.fonts import FONT, TITLE
from ..viz.fragments import Safe, image_tag, note, table, view
from .linear import LinearAttention, Recurrent
from .readers import DELTA, SCAN

if TYPE_CHECKING:
    from PIL.Image import Image

HEADER = ["layer", "kind", "heads", "gate", "decay", "last state norm", "self mixing"]
SAID = (
    "these layers keep a recurrent state instead of an attention matrix: shown are their gates "
    "(gate: the mean beta, or Mamba's mean dt), decay per step, state norm and the token mixing they imply"
)


def self_share(mixing: Tensor) -> float:
    """How much of each token's mixing is its own value: the mean of ``|M[t, t]| / sum_j |M[t, j]|``.

    Args:
        mixing: ``(B, H, T, T)`` implied token mixing.

    Returns:
        The mean share, in [0, 1].
    """
    magnitude = mixing.abs()
    rows = magnitude.sum(dim=-1).clamp_min(1e-30)
    return float((magnitude.diagonal(dim1=-2, dim2=-1) / rows).mean())


def _row(call: Recurrent) -> list[str]:
    gate = call.gates["beta" if call.kind == DELTA else "dt"]
    share = "" if call.mixing is None else f"{self_share(call.mixing):.3f}"
    units = f"{call.decay.shape[1]}" + (" channels" if call.kind == SCAN else "")
    last = float(call.state_norms[..., -1].mean())
    return [call.name, call.kind, units, f"{float(gate.mean()):.4f}", f"{float(call.decay.mean()):.4f}",
            f"{last:.4f}", share]  # fmt: skip


def linear_table(result: LinearAttention) -> str:
    """``LinearAttention.table()``: a row per layer (means over the batch, heads and steps), the remarks below."""
    rows = [_row(result.calls[name]) for name in result.layers]
    return "\n".join([*columns([HEADER, *rows], right=range(2, len(HEADER))), *result.remarks])


def linear_plot(result: LinearAttention, layer: str | int = 0, *, batch: int = 0) -> Image:
    """``LinearAttention.plot()``: the layer's mixing (mean magnitude over heads) beside its state norms per step."""
    if not 0 <= batch < len(result.mask):
        raise OptionError(f"batch={batch} is out of range: {len(result.mask)} sequences ran")
    call = result.layer(layer)
    fig = new_figure(8.0, 3.4)
    left, right = fig.subplots(1, 2)
    if call.mixing is not None:
        left.imshow(call.mixing[batch].abs().mean(dim=0).cpu().numpy(), cmap="viridis")
    left.set_title("token mixing |M| (row: output token)", fontsize=TITLE)
    left.set_xlabel("input token", fontsize=FONT)
    norms = call.state_norms[batch].cpu()  # (H, T)
    right.plot(norms.mean(dim=0).numpy(), label="mean", linewidth=2)
    right.plot(norms.amax(dim=0).numpy(), "--", label="max", linewidth=1)
    right.set_title("state norm per step", fontsize=TITLE)
    right.set_xlabel("token", fontsize=FONT)
    right.legend(fontsize=FONT)
    fig.suptitle(f"{call.name} ({call.kind})", fontsize=TITLE)
    return figure_image(fig)


def _place(result: LinearAttention) -> tuple[str, str]:
    return "linear-attention", "Linear attention: gates, decay and state"


@shows_as(LinearAttention, table=linear_table, plot=linear_plot, section=_place)
def linear_html(result: LinearAttention) -> Safe:
    """The table, the first layer's picture and the remarks, one block."""
    rows = [_row(result.calls[name]) for name in result.layers]
    body = Safe(note(SAID) + table(HEADER, rows, numeric=range(2, len(HEADER))))
    if result.layers:
        body = Safe(body + image_tag(linear_plot(result), alt=f"{result.layers[0]}: mixing and state", width=None))
    for remark in result.remarks:
        body = Safe(body + note(remark))
    return view(body, title=f"Linear attention of {len(result.layers)} layers")
