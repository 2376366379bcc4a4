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

A model whose attention layers are all linear (Mamba: a recurrent state, no softmax matrix) gets a
second pass, read by ``hookscope.linear_attention``: the page says that softmax attention maps do
not exist for it and shows the ``LinearAttention`` section instead (gates, decay, state norms and
the token mixing they imply); its token norms come from that pass.

Padding is left out everywhere. Every token is text, escaped by the template (autoescape), never
markup: a token ``<img src=x onerror=alert(1)>`` shows as those characters (captum#1226). The
first ``MAX_SENTENCES`` sequences of a batch are drawn.

The page's data is ``hookscope.transformer.text_content``; its HTML, table and notebook view are
``hookscope.transformer.text_views``.
"""

from __future__ import annotations

import dataclasses
import datetime
import warnings
from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from .._version import __version__
from ..core.capture import Capture, capture
from ..core.records import forward_order
from ..core.select import BLOCKS, Selector
from ..errors import CaptureError, CaptureWarning, OptionError
from ..progress import Callback, Progress, callback
from ..report.cards import png
from ..report.content import human_time
from . import text_views  # noqa: F401  (registers the page, the table and the notebook view)
from .attention import Attention, attention
from .grid import attention_grid
from .linear import LinearAttention
from .readers import linear_layers
from .recurrent import linear_attention
from .text_content import AttentionLayer, MeanView, NormRow, TextReport

MAX_SENTENCES = 4  # sequences of a batch the page draws


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
    Every attention module the model ran is drawn, whatever ``select`` says; a model of linear attention only
    (Mamba) runs once more and its page shows its ``LinearAttention`` instead (``TextReport.linear``).

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
        CaptureError: no attention module ran, softmax or linear.
        SelectionError: ``select`` matches no module.
    """
    if isinstance(max_layers, bool) or not isinstance(max_layers, int) or max_layers < 1:
        raise OptionError(f"max_layers must be a positive int, got {max_layers!r}")
    step = callback(progress)
    step("forward", 0, 1)
    cap, read, caught = _read(model, inputs, tokenizer, select)
    step("forward", 1, 1)
    own = set(read.remarks) if isinstance(read, LinearAttention) else set()  # drawn in its own section
    uncaptured = [str(w.message).removeprefix("hookscope: ") for w in caught if w.category is CaptureWarning]
    for other in (w for w in caught if w.category is not CaptureWarning):  # not ours to swallow
        warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
    shown = min(len(read.tokens), MAX_SENTENCES)
    drawn = _drawn(read, shown, max_layers, step) if isinstance(read, Attention) else []
    left_out = len(read.layers) - len(drawn) if isinstance(read, Attention) else 0
    remarks = _remarks(model, read, shown, left_out) + [line for line in uncaptured if line not in own]
    return TextReport(
        title=title,
        model=type(model).__name__,
        parameters=sum(p.numel() for p in model.parameters()),
        created=human_time(datetime.datetime.now().astimezone()),
        version=__version__,
        sentences=tuple(tuple(_real_tokens(read, b)) for b in range(shown)),
        attention=tuple(drawn),
        norms=tuple(_norm_rows(cap, read, shown, max_layers)),
        notes=tuple(notes),
        remarks=tuple(remarks),
        linear=read if isinstance(read, LinearAttention) else None,
    )


def _read(
    model: nn.Module, inputs: Any, tokenizer: Any, select: Selector | None
) -> tuple[Capture, Attention | LinearAttention, list[warnings.WarningMessage]]:
    """One forward pass under a capture of ``select``: its attention; for a model whose attention layers are all
    linear (Mamba), which have no softmax matrix, a second pass that reads them (``linear_attention``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CaptureWarning)
        try:
            with capture(model, select, kinds=("output",)) as cap:
                read: Attention | LinearAttention = attention(model, inputs, tokenizer=tokenizer)
        except CaptureError:
            if not linear_layers(model):
                raise
            caught.clear()  # the first pass's lines: the second pass says its own
            with capture(model, select, kinds=("output",)) as cap:
                read = linear_attention(model, inputs, tokenizer=tokenizer)
    return cap, read, caught


def _drawn(att: Attention, shown: int, max_layers: int, step: Callback) -> list[AttentionLayer]:
    """The first ``max_layers`` attention layers, drawn."""
    layers = att.layers[:max_layers]
    drawn = []
    for i, name in enumerate(layers):
        step("attention", i, len(layers))
        drawn.append(_attention_layer(att, name, shown))
    step("attention", len(layers), len(layers))
    return drawn


def _real_tokens(read: Attention | LinearAttention, batch: int) -> list[str]:
    """Sequence ``batch``'s tokens, padding left out."""
    return [t for t, keep in zip(read.tokens[batch], read.mask[batch].tolist(), strict=True) if keep]


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


def _norm_rows(cap: Any, att: Attention | LinearAttention, shown: int, max_layers: int) -> list[NormRow]:
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


def _remarks(model: nn.Module, att: Attention | LinearAttention, shown: int, left_out: int) -> list[str]:
    remarks = [] if isinstance(att, Attention) else [_no_softmax(model, att)]
    if model.training:
        remarks.append("the model is in training mode: attention dropout was active; call model.eval() first")
    if len(att.tokens) > shown:
        remarks.append(f"the batch has {len(att.tokens)} sequences; the page draws the first {shown}")
    if left_out:
        remarks.append(f"{left_out} more attention layers ran but are left out (raise max_layers=, --max-layers)")
    return remarks


def _no_softmax(model: nn.Module, lin: LinearAttention) -> str:
    kinds = ", ".join(sorted({call.kind for call in lin.calls.values()}))
    return (
        f"softmax attention maps do not exist for {type(model).__name__}: its {len(lin.layers)} attention layers are "
        f"linear ({kinds}), with a recurrent state; the linear-attention section shows their gates, decay, state "
        "norms and the token mixing they imply"
    )
