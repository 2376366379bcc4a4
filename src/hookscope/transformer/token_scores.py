"""``TokenAttribution``, what ``token_attribution`` returns: each row's tokens and words with their
scores, and how it shows itself (a line per token, the words shaded by their scores, the notebook view).

Pillow is imported when a picture is drawn.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..base.display import Shows, plot_of, shows_as, table_of
from ..base.words import columns
from ..viz.highlight import token_html, token_image

if TYPE_CHECKING:
    from PIL.Image import Image


@dataclass(eq=False)
class TokenAttribution(Shows):
    """Per-token and per-word attributions of one scalar, one list entry per input row.

    Attributes:
        tokens: per row, its tokens (padding left out).
        scores: per row, a ``(tokens,)`` tensor of attributions.
        words: per row, its words (word pieces merged).
        word_scores: per row, a ``(words,)`` tensor: the sums of their tokens' scores.
        attributions: ``(B, T)``: every position's score, padding included.
        value: ``f(x)``, the target's value.
        baseline_value: ``f(baseline)`` with integrated gradients; else None.
        delta: ``sum(attributions) - (f(x) - f(baseline))`` with integrated gradients; else None.
        method: ``integrated_gradients`` or ``input_x_gradient``.
        steps: integration points (integrated gradients).
    """

    tokens: list[list[str]]
    scores: list[Tensor]  # (tokens,) per row, padding left out
    words: list[list[str]]
    word_scores: list[Tensor]  # (words,) per row
    attributions: Tensor  # (B, T): every position, padding included
    value: float  # f(x)
    baseline_value: float | None  # f(baseline) (integrated gradients)
    delta: float | None  # sum of attributions - (f(x) - f(baseline)) (integrated gradients)
    method: str
    steps: int

    def table(self, *, words: bool = False) -> str:
        """A line per token (or per word) of every row: the row, its position, the token and its score.

        Args:
            words: a line per word instead of per token.

        Returns:
            The table, as text.
        """
        return table_of(self, words=words)

    def plot(self, *, words: bool = True) -> Image:
        """A PIL image: each row's words (or tokens) coloured by their scores, red raises f, blue lowers it.

        Args:
            words: colour words (the default) rather than tokens.

        Returns:
            A PIL image.

        Raises:
            MissingDependencyError: Pillow is not installed.
        """
        return plot_of(self, words=words)

    def __repr__(self) -> str:
        tail = "" if self.delta is None else f", delta {self.delta:+.2e}"
        return f"<TokenAttribution {self.method}: {len(self.tokens)} row(s), f(x) = {self.value:.4g}{tail}>"


def attribution_table(result: TokenAttribution, *, words: bool = False) -> str:
    """``TokenAttribution.table()``: a line per token (``words=True``: per word) of every row, and the values."""
    texts, values = (result.words, result.word_scores) if words else (result.tokens, result.scores)
    lines = [["row", "word" if words else "token", "text", "score"]]
    for row, (items, row_scores) in enumerate(zip(texts, values, strict=True)):
        for index, (text, value) in enumerate(zip(items, row_scores.tolist(), strict=True)):
            lines.append([str(row), str(index), text, f"{float(value):+.4g}"])
    return "\n".join([*columns(lines, right=(0, 1, 3)), _line(result)])


def attribution_plot(result: TokenAttribution, *, words: bool = True) -> Any:
    """``TokenAttribution.plot()``: each row's words (or tokens) shaded on one shared scale, as the HTML view."""
    texts, values = (result.words, result.word_scores) if words else (result.tokens, result.scores)
    return token_image(texts, values)


def _line(result: TokenAttribution) -> str:
    what = result.method.replace("_", " ")
    line = f"{what}: f(x) = {result.value:.4g}"
    if result.delta is not None and result.baseline_value is not None:
        line += f", f(baseline) = {result.baseline_value:.4g}, {result.steps} steps, delta = {result.delta:+.2e}"
    return line


@shows_as(TokenAttribution, table=attribution_table, plot=attribution_plot)
def attribution_html(result: TokenAttribution) -> str:
    """Each row's words shaded by their scores on one shared scale, and the completeness line."""
    reach = max((float(s.abs().max()) for s in result.word_scores if s.numel()), default=0.0)
    rows = "".join(
        f'<div style="margin:4px 0">{token_html(w, s, scale=reach)}</div>'
        for w, s in zip(result.words, result.word_scores, strict=True)
    )
    note = f'<div style="color:#555;font-size:12px">{html.escape(_line(result))}; red raises f, blue lowers it</div>'
    return f'<div class="hs-attribution" style="font:14px sans-serif">{rows}{note}</div>'
