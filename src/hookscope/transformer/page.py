"""A report of a text model: its attention, layer by layer, and what each token became.

::

    page = hookscope.build_text_report(model, tokenizer(texts, padding=True, return_tensors="pt"), tokenizer=tokenizer)
    hookscope.write_report(page, "report")   # report/index.html, self-contained like every report
    page                                     # in a notebook: the layers and the first layer's heads
    print(page.table())                      # a row per attention layer: heads, mean attention to itself

One forward pass, under a capture of ``select`` (the model's blocks by default) and
``hookscope.attention`` at once, gives the page:

- per attention layer, every head as a T x T heatmap with its tokens on both axes
  (``hookscope.attention_grid``) and the head-averaged weights as a table of shaded cells, a
  token heading each row and column, the weight in each cell's title;
- per selected module whose output is ``(B, T, C)`` (a block's hidden states), the norm of each
  token's vector, as a table of shaded cells: how large each token's state grows through depth;
- a section for token attributions, drawn by whoever computes them: ``attributions`` holds
  ``(title, html)`` fragments made by ``hookscope.viz.highlight.token_html``, which escapes
  every token (see ``with_attributions``).

Padding is left out everywhere. Every token is text, escaped by the template (autoescape), never
markup: a token ``<img src=x onerror=alert(1)>`` shows as those characters (captum#1226). The
first ``MAX_SENTENCES`` sequences of a batch are drawn.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from .._version import __version__
from ..base.display import Shows, shows_as, table_of
from ..base.optional import require
from ..base.words import columns
from ..core.capture import capture
from ..core.records import forward_order
from ..core.select import BLOCKS, Selector
from ..errors import CaptureWarning, OptionError
from ..progress import Progress, callback
from ..report.content import human_time, png
from ..report.html import draws_page, environment, write_page
from ..viz.fragments import Safe, figure, more, note, table, view
from .attention import Attention, attention
from .grid import FONT, attention_grid

TEMPLATE = "tokens.html.j2"  # beside report.html.j2
MAX_SENTENCES = 4  # sequences of a batch the page draws
MAX_SHOWN = 24  # attention layers listed in the notebook view
READABLE = 9  # CSS pixels: the smallest a head grid's labels are shown, at any screen width


@dataclass(frozen=True)
class MeanView:
    """One sequence's head-averaged attention: ``rows[i][j]`` is how much token i looks at token j."""

    tokens: tuple[str, ...]
    rows: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class AttentionLayer:
    """One attention module: its heads drawn per sequence, and their mean as numbers."""

    name: str
    heads: int
    grids: tuple[bytes, ...]  # PNG per sequence: every head and the mean (attention_grid)
    means: tuple[MeanView, ...]


@dataclass(frozen=True)
class NormRow:
    """One module's output: the L2 norm of each token's vector, per sequence (padding left out)."""

    name: str
    type: str
    norms: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class TextReport(Shows):
    """What the text report's page shows; ``render_html`` (``render_text_html``) draws it."""

    title: str
    model: str
    parameters: int
    created: str
    version: str
    sentences: tuple[tuple[str, ...], ...]  # the real tokens of each sequence drawn
    attention: tuple[AttentionLayer, ...]
    norms: tuple[NormRow, ...]
    notes: tuple[str, ...] = ()
    remarks: tuple[str, ...] = ()
    attributions: tuple[tuple[str, str], ...] = ()  # (title, escaped HTML from viz.highlight.token_html)

    def __repr__(self) -> str:
        return f"<TextReport {self.title!r}: {self.model}, {len(self.attention)} attention layers>"

    def table(self) -> str:
        """A row per attention layer: heads, and each sequence's mean head-averaged attention of a token to itself."""
        return table_of(self)


def build_text_report(
    model: nn.Module,
    inputs: Any,
    *,
    tokenizer: Any = None,
    select: Selector | None = BLOCKS,
    title: str = "hookscope text report",
    notes: Sequence[str] = (),
    max_layers: int = 64,
    progress: Progress = None,
) -> TextReport:
    """Run ``model`` once on ``inputs`` (a ``BatchEncoding``, ids, or text with ``tokenizer``) and gather the page.

    ``select`` picks the modules whose token norms the page draws (a Selector, as everywhere); its default,
    ``":blocks"``, is the model's repeated blocks (the encoder layers), and None would be every leaf module.
    Every attention module the model ran is drawn, whatever ``select`` says.

    Args:
        model: the transformer, in eval mode.
        inputs: a ``BatchEncoding``, a tensor of ids, or text with ``tokenizer``.
        tokenizer: encodes text and names the tokens.
        select: the modules whose token norms are drawn; ``":blocks"`` by default, None every leaf.
        title: the page's title.
        notes: lines shown under the title.
        max_layers: the most layers drawn.
        progress: None or False (quiet), True (lines on stderr), a stream, or a callable
            ``(stage, done, total)`` (``hookscope.progress``).

    Returns:
        The text page's content; ``render_html`` or ``write_report`` draws it.

    Raises:
        OptionError: ``max_layers`` is not a positive int.
        InputError: text without ``tokenizer``.
        CaptureError: no attention module ran.
        SelectionError: ``select`` matches no module.
    """
    if isinstance(max_layers, bool) or not isinstance(max_layers, int) or max_layers < 1:
        raise OptionError(f"max_layers must be a positive int, got {max_layers!r}")
    step = callback(progress)
    step("forward", 0, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CaptureWarning)
        with capture(model, select, kinds=("output",)) as cap:
            att = attention(model, inputs, tokenizer=tokenizer)
    step("forward", 1, 1)
    uncaptured = [str(w.message).removeprefix("hookscope: ") for w in caught if w.category is CaptureWarning]
    for other in (w for w in caught if w.category is not CaptureWarning):  # not ours to swallow
        warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
    shown = min(len(att.tokens), MAX_SENTENCES)
    layers = att.layers[:max_layers]
    drawn = []
    for i, name in enumerate(layers):
        step("attention", i, len(layers))
        drawn.append(_attention_layer(att, name, shown))
    step("attention", len(layers), len(layers))
    remarks = _remarks(model, att, shown, len(att.layers) - len(layers)) + uncaptured
    return TextReport(
        title=title,
        model=type(model).__name__,
        parameters=sum(p.numel() for p in model.parameters()),
        created=human_time(datetime.datetime.now().astimezone()),
        version=__version__,
        sentences=tuple(tuple(att.real_tokens(b)) for b in range(shown)),
        attention=tuple(drawn),
        norms=tuple(_norm_rows(cap, att, shown, max_layers)),
        notes=tuple(notes),
        remarks=tuple(remarks),
    )


def with_attributions(report: TextReport, fragments: Sequence[tuple[str, str]]) -> TextReport:
    """``report`` with a token-attribution section: ``(title, html)`` pairs, the html from ``token_html``."""
    return dataclasses.replace(report, attributions=(*report.attributions, *fragments))


def _attention_layer(att: Attention, name: str, shown: int) -> AttentionLayer:
    grids = tuple(png(attention_grid(att, name, batch=b)) for b in range(shown))
    means = []
    for b in range(shown):
        keep = att.mask[b]
        mean = att.mean_heads(name)[b].cpu()[keep][:, keep].double()  # (t, t)
        rows = tuple(tuple(round(float(v), 4) for v in row) for row in mean)
        means.append(MeanView(tuple(att.real_tokens(b)), rows))
    return AttentionLayer(name, int(att.weights(name).shape[1]), grids, tuple(means))


def _norm_rows(cap: Any, att: Attention, shown: int, max_layers: int) -> list[NormRow]:
    """A row per captured module whose first output is ``(B, T, C)`` with the batch's B and T."""
    batch, length = att.mask.shape
    rows: list[NormRow] = []
    for record in forward_order(cap):
        if not record.calls or len(rows) >= max_layers:
            continue
        tensor = _hidden(record.calls[0])
        if tensor is None or tuple(tensor.shape[:2]) != (batch, length):
            continue
        norms = tensor.detach().double().norm(dim=-1).cpu()  # (B, T)
        per = tuple(tuple(round(float(v), 4) for v in norms[b][att.mask[b]]) for b in range(shown))
        rows.append(NormRow(record.name, record.type, per))
    return rows


def _hidden(call: Any) -> Tensor | None:
    try:
        tensor = call.first("output")
    except Exception:  # nothing held: the remark of a CaptureWarning says why
        return None
    return tensor if isinstance(tensor, Tensor) and tensor.dim() == 3 and tensor.is_floating_point() else None


def _remarks(model: nn.Module, att: Attention, shown: int, left_out: int) -> list[str]:
    remarks = []
    if model.training:
        remarks.append("the model is in training mode: attention dropout was active; call model.eval() first")
    if len(att.tokens) > shown:
        remarks.append(f"the batch has {len(att.tokens)} sequences; the page draws the first {shown}")
    if left_out:
        remarks.append(f"{left_out} more attention layers ran but are left out (raise max_layers=, --max-layers)")
    return remarks


@draws_page(TextReport)
def render_text_html(report: TextReport) -> str:
    """The text report as one self-contained page (``templates/tokens.html.j2``, autoescaped)."""
    markupsafe: Any = require("markupsafe")
    attributions = [(title, markupsafe.Markup(fragment)) for title, fragment in report.attributions]
    env = environment()
    env.globals.update(shade=_shade, table_max=table_max, least_width=least_width)
    html: str = env.get_template(TEMPLATE).render(report=report, attributions=attributions)
    return html


def write_text_report(report: TextReport, out: str | Path, *, force: bool = False) -> Path:
    """Write ``out/index.html`` (staged next to ``out``, moved into place when complete) and return its path."""
    return write_page(lambda: render_text_html(report), out, force=force)


def text_table(report: TextReport) -> str:
    """A row per attention layer drawn: its heads and, per sequence, the mean attention of a token to itself."""
    header = ["layer", "heads", *(f"self, seq {b}" for b in range(len(report.sentences)))]
    rows = [header] + [[layer.name, str(layer.heads), *(f"{_self_attention(m):.4f}" for m in layer.means)]
                       for layer in report.attention]  # fmt: skip
    return "\n".join(columns(rows, right=range(1, len(header))))


def _self_attention(mean: MeanView) -> float:
    """The mean of the diagonal of a sequence's head-averaged attention: how much a token looks at itself."""
    return sum(mean.rows[i][i] for i in range(len(mean.rows))) / max(len(mean.rows), 1)


@shows_as(TextReport, table=text_table)
def text_report_html(report: TextReport) -> str:
    """The notebook view: the page's notes, a row per attention layer, and the first layer's heads."""
    body = note(f"{report.model}, {report.parameters:,} parameters; {len(report.sentences)} sequence(s) drawn")
    for line in (*report.notes, *report.remarks):
        body += note(line)
    rows = [(layer.name, layer.heads) for layer in report.attention[:MAX_SHOWN]]
    body += table(("attention layer", "heads"), rows, numeric=(1,)) + more(len(rows), len(report.attention), "layers")
    if report.attention and report.attention[0].grids:
        first = report.attention[0]
        grid = figure(first.grids[0], f"{first.name}: every head and their mean, sequence 0")
        body += Safe('<div class="hs-scroll">') + grid + Safe("</div>")  # natural size: labels stay readable
    return view(body, title=report.title)


def _shade(value: float, top: float) -> str:
    """The CSS background of a cell: the accent colour at ``value / top`` strength."""
    strength = 0.0 if top <= 0 else max(0.0, min(1.0, value / top))
    return f"background: color-mix(in srgb, var(--accent) {100 * strength:.0f}%, transparent)"


def least_width(picture: bytes) -> int:
    """The narrowest a head grid (PNG bytes) is shown, in CSS pixels: its FONT-pixel labels stay READABLE."""
    width = int.from_bytes(picture[16:20], "big")  # the PNG's IHDR chunk: width, then height
    return math.ceil(width * READABLE / FONT)


def table_max(rows: Sequence[Sequence[float]]) -> float:
    """The largest value of a table (0 for an empty one)."""
    return max((max(row) for row in rows if row), default=0.0)
