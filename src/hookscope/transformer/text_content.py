"""What the text page shows, as plain data: ``TextReport`` and its views, PNG bytes, no tensors.

``transformer.page`` (``build_text_report``) fills it; ``transformer.text_views`` draws it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.display import Shows, table_of
from .linear import LinearAttention


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
    linear: LinearAttention | None = None  # a model of linear attention only (Mamba): what it has instead

    def __repr__(self) -> str:
        if self.linear is not None:
            return f"<TextReport {self.title!r}: {self.model}, {len(self.linear.layers)} linear-attention layers>"
        return f"<TextReport {self.title!r}: {self.model}, {len(self.attention)} attention layers>"

    def table(self) -> str:
        """A row per attention layer: heads, and each sequence's mean head-averaged attention of a token to itself."""
        return table_of(self)
