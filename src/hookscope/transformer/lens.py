"""The logit lens: what a decoder would predict if it stopped after each block.

::

    lens = logit_lens(model, input_ids, top_k=5)   # GPT-2: norm transformer.ln_f, unembed lm_head, found
    lens.ids[-1]      # (B, T, k) top-k token ids after the last block: the model's own top-k
    lens.probs[0]     # (B, T, k) their probabilities after the first block
    lens.tokens       # the same as strings, [layer][batch][position][rank], with tokenizer=
    print(lens.table()); lens.plot()               # layers down, positions across: the top guess

Each selected block's output (its first tensor, the residual stream) goes through the final norm
and the unembedding exactly as the model sends its last hidden state: ``unembed(norm(h))``, then a
softmax over the vocabulary (nostalgebraist 2020). ``unembed`` defaults to the model's
``get_output_embeddings()`` (Hugging Face's ``lm_head``) and ``norm`` to its final norm, found by
the names Hugging Face models give it (``ln_f``, ``norm``, ``final_layer_norm``... on the base
model or its decoder: ``transformer.ln_f`` on GPT-2, ``model.norm`` on Llama); pass either to
choose. On GPT-2 the last block's lens is the model's logits, bit for bit; a model whose last
block is followed by more than ``norm`` (a projection, a soft cap) differs there.
"""

from __future__ import annotations

import html
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn

from ..base.deprecation import renamed
from ..base.display import Shows, plot_of, shows_as, table_of
from ..base.words import columns
from ..core.capture import capture
from ..core.select import BLOCKS, Selector, select_modules
from ..errors import CaptureWarning, OptionError, SelectionError
from ..viz.charts import figure_image, new_figure
from ..viz.fonts import FONT, TITLE
from .text import encoded, model_part

if TYPE_CHECKING:
    from PIL.Image import Image

Head = Callable[[Tensor], Tensor]  # a module or a function: (B, T, D) -> (B, T, D) or (B, T, V)
NORM_NAMES = ("ln_f", "norm", "final_layer_norm", "final_layernorm", "norm_f", "final_norm")


@dataclass(eq=False)
class LogitLens(Shows):
    """Top-k next-token guesses after each block: ``ids`` and ``probs`` are ``(layers, B, T, k)``.

    Attributes:
        layers: the blocks read, in model order.
        ids: ``(layers, B, T, k)``: the top-k token ids after each block.
        probs: ``(layers, B, T, k)``: their probabilities.
        inputs: the input tokens per row, with a tokenizer; else None.
        tokens: ``[layer][row][position][rank]`` token strings, with a tokenizer; else None.
    """

    layers: list[str]
    ids: Tensor
    probs: Tensor
    inputs: list[list[str]] | None = None  # the input tokens per row, with a tokenizer
    tokens: list[list[list[list[str]]]] | None = None  # [layer][row][position][rank], with a tokenizer

    def table(self, *, row: int = 0) -> str:
        """Row ``row`` as text: a line per layer, a column per position, the top token and its probability.

        Args:
            row: the batch row shown.

        Returns:
            The table, as text.
        """
        return table_of(self, row=row)

    def plot(self, *, row: int = 0) -> Image:
        """Row ``row`` as a PIL heatmap: layers down, positions across, shaded by the top token's probability.

        Args:
            row: the batch row drawn.

        Returns:
            A PIL image of the heatmap.

        Raises:
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        return plot_of(self, row=row)

    def __repr__(self) -> str:
        layers, batch, length, k = self.ids.shape
        return f"<LogitLens: {layers} layers x {batch} rows x {length} positions, top {k}>"


@renamed(blocks="select", k="top_k")
def logit_lens(
    model: nn.Module,
    input_ids: Tensor | Mapping[str, Any] | str | Sequence[str],
    *,
    unembed: Head | None = None,
    norm: Head | Literal["auto"] | None = "auto",
    select: Selector | None = BLOCKS,
    top_k: int = 5,
    tokenizer: Any = None,
) -> LogitLens:
    """The logit lens of ``model`` on ``input_ids`` (a tensor, a tokenizer's dict, or text with ``tokenizer=``).

    ``select`` picks the residual blocks (``":blocks"``, the default, and None: the model's repeated
    blocks, ``transformer.h.0`` ... on GPT-2); it selects as ``capture`` does, so a glob such as
    ``"transformer.h.*"`` also matches the blocks' parts, and a selection with a module inside
    another is a ``SelectionError`` that names ``":blocks"``. ``unembed`` (None: the model's
    ``get_output_embeddings()``) and ``norm`` (``"auto"``: the model's final norm, found by name,
    with a ``CaptureWarning`` when none is found; None: no norm) are applied to each block's output.
    ``tokenizer`` encodes text and turns the ids into strings. ``blocks=`` and ``k=`` are the old
    names of ``select=`` and ``top_k=`` (deprecated).

    Args:
        model: the language model.
        input_ids: a ``(B, T)`` tensor of ids, a tokenizer's dict, or text with ``tokenizer``.
        unembed: the map from hidden states to logits; None uses ``model.get_output_embeddings()``.
        norm: the final norm applied before ``unembed``; ``"auto"`` finds the model's, None applies none.
        select: the residual blocks; ``":blocks"`` (the default) is the model's repeated blocks.
        top_k: how many guesses are kept per position.
        tokenizer: encodes text and turns ids into strings; None keeps ids only.

    Returns:
        A ``LogitLens`` whose ``ids`` and ``probs`` are ``(layers, B, T, top_k)``.

    Raises:
        OptionError: ``top_k`` is not a positive int or exceeds the vocabulary, or no unembedding is found.
        InputError: text without ``tokenizer``.
        SelectionError: ``select`` matches no module.
    """
    if not isinstance(top_k, int) or top_k < 1:
        raise OptionError(f"top_k must be a positive int, got {top_k!r}")
    batch: Tensor | Mapping[str, Any] = encoded(input_ids, tokenizer, caller="logit_lens")
    unembed = output_embeddings(model) if unembed is None else unembed
    norm = final_norm(model) if norm == "auto" else norm
    names = [name for name, _ in select_modules(model, BLOCKS if select is None else select)]
    _check_residual(select, names)
    with capture(model, names) as cap, torch.no_grad():
        if isinstance(batch, Mapping):
            model(**batch)
        else:
            model(batch)
    values, indices = [], []
    with torch.no_grad():
        for name in names:  # one layer's (B, T, V) probabilities at a time
            probs = lens_probs(cap[name].first("output"), unembed, norm)
            if probs.shape[-1] < top_k:
                raise OptionError(f"top_k={top_k} is more than the {probs.shape[-1]} entries of the unembedding")
            top = probs.topk(top_k, dim=-1)
            values.append(top.values)
            indices.append(top.indices)
    lens = LogitLens(names, torch.stack(indices), torch.stack(values))
    if tokenizer is not None:
        _name_tokens(lens, batch["input_ids"] if isinstance(batch, Mapping) else batch, tokenizer)
    return lens


def _name_tokens(lens: LogitLens, ids: Tensor, tokenizer: Any) -> None:
    """The inputs and the guesses as the tokenizer writes them."""
    lens.inputs = [tokenizer.convert_ids_to_tokens(row) for row in ids.tolist()]
    lens.tokens = [[[tokenizer.convert_ids_to_tokens(r) for r in row] for row in layer] for layer in lens.ids.tolist()]


def output_embeddings(model: nn.Module) -> nn.Module:
    """The model's unembedding: ``model.get_output_embeddings()`` (a Hugging Face LM's ``lm_head``)."""
    advice = "get_output_embeddings() returning a module; pass unembed=<its unembedding, e.g. model.lm_head>"
    return model_part(model, "get_output_embeddings", advice)


def final_norm(model: nn.Module) -> nn.Module | None:
    """The norm after the last block, by the names Hugging Face models give it (see the module doc); None
    (with a ``CaptureWarning``) when there is none by those names."""
    base = getattr(model, "base_model", model)
    for owner in (base, getattr(base, "decoder", None), model):
        for name in NORM_NAMES:
            found = getattr(owner, name, None) if isinstance(owner, nn.Module) else None
            if isinstance(found, nn.Module):
                return found
    warnings.warn(
        f"logit_lens found no final norm in {type(model).__name__} (looked for {', '.join(NORM_NAMES)}); "
        "the lens runs without one: pass norm=<the final norm module>, or norm=None to say there is none",
        CaptureWarning,
        stacklevel=4,  # final_norm, logit_lens, its deprecation wrapper, the caller
    )
    return None


def lens_probs(hidden: Tensor, unembed: Head, norm: Head | None = None) -> Tensor:
    """``softmax(unembed(norm(hidden)))`` over the last axis: ``(B, T, D)`` -> ``(B, T, V)``."""
    logits = unembed(hidden if norm is None else norm(hidden))
    return torch.softmax(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, dim=-1)


def inner(names: list[str]) -> list[str]:
    """The names of ``names`` inside another of them (``h.0.attn`` when ``h.0`` is there)."""
    return [n for n in names if any(n.startswith(f"{o}.") or o == "" for o in names if o != n)]


def _check_residual(select: Selector | None, names: list[str]) -> None:
    """A lens reads what whole blocks return: a selection holding a module and its parts is refused."""
    parts = inner(names)
    if not parts:
        return
    outer = [n for n in names if n not in parts]
    shown = ", ".join(parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")
    raise SelectionError(
        f"logit_lens reads the residual stream whole blocks return, but select={select!r} also picks "
        f"{len(parts)} modules inside the others ({shown}): a glob matches every module under a name, as in "
        f"capture; ask for the blocks with select=':blocks', or name them{_regex_hint(outer)}"
    )


def _regex_hint(names: list[str]) -> str:
    """``" (select='re:h\\.\\d+')"`` when ``names`` are a numbered list's items, else ``""``."""
    prefixes = {re.sub(r"\d+$", "", n) for n in names}
    if len(prefixes) != 1 or any(not n[-1:].isdigit() for n in names):
        return ""
    return f" (select={'re:' + re.escape(prefixes.pop()) + chr(92) + 'd+'!r})"


def lens_table(lens: LogitLens, *, row: int = 0) -> str:
    """``LogitLens.table()``: a line per layer, a column per position: the top token and its probability."""
    _check_row(lens, row)
    length = lens.ids.shape[2]
    lines = [["", *(_input(lens, row, t) for t in range(length))]]
    for layer, name in enumerate(lens.layers):
        cells = [f"{_token(lens, layer, row, t, 0)} {float(lens.probs[layer, row, t, 0]):.2f}" for t in range(length)]
        lines.append([name, *cells])
    return "\n".join(columns(lines))


def lens_plot(lens: LogitLens, *, row: int = 0) -> Any:
    """``LogitLens.plot()``: a heatmap of the top token's probability, layers down, positions across,
    each cell labelled with its top token (matplotlib, then a PIL image)."""
    _check_row(lens, row)
    layers, _, length, _ = lens.ids.shape
    top = lens.probs[:, row, :, 0].double().cpu()  # (layers, T)
    fig = new_figure(3.0 + 0.7 * length, 2.2 + 0.35 * layers)
    ax = fig.add_subplot()
    shown = ax.imshow(top.numpy(), cmap="Reds", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(layers), lens.layers, fontsize=FONT)
    ax.set_xticks(range(length), [_cut(_input(lens, row, t)) for t in range(length)], fontsize=FONT, rotation=90)
    ax.set_title("top guess after each block, and its probability", fontsize=TITLE)
    for layer in range(layers):
        for t in range(length):
            colour = "white" if float(top[layer, t]) > 0.6 else "black"
            guess = _cut(_token(lens, layer, row, t, 0))
            ax.text(t, layer, guess, ha="center", va="center", fontsize=FONT, color=colour)
    fig.colorbar(shown, ax=ax, shrink=0.8)
    return figure_image(fig)


def _cut(text: str, most: int = 12) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _check_row(lens: LogitLens, row: int) -> None:
    if not 0 <= row < lens.ids.shape[1]:
        raise OptionError(f"row={row} is out of range: the lens holds {lens.ids.shape[1]} rows")


@shows_as(LogitLens, table=lens_table, plot=lens_plot)
def lens_html(lens: LogitLens, row: int = 0) -> str:
    """A table for one row: a line per layer, a column per position, the top token and its probability."""
    layers, _, length, _ = lens.ids.shape
    head = "".join(f"<th>{html.escape(_input(lens, row, t))}</th>" for t in range(length))
    lines = [f"<tr><th></th>{head}</tr>"]
    for layer in range(layers):
        cells = []
        for t in range(length):
            p = float(lens.probs[layer, row, t, 0])
            tip = html.escape(_guesses(lens, layer, row, t), quote=True)
            shade = f"background:rgba(178,24,43,{0.7 * p:.3f})"
            cells.append(f'<td style="{shade}" title="{tip}">{html.escape(_token(lens, layer, row, t, 0))}</td>')
        lines.append(f"<tr><th>{html.escape(lens.layers[layer])}</th>{''.join(cells)}</tr>")
    style = "border-collapse:collapse;font:12px monospace;white-space:pre"
    return f'<table class="hs-lens" style="{style}">{"".join(lines)}</table>'


def _token(lens: LogitLens, layer: int, row: int, t: int, rank: int) -> str:
    if lens.tokens is not None:
        return lens.tokens[layer][row][t][rank]
    return str(int(lens.ids[layer, row, t, rank]))


def _input(lens: LogitLens, row: int, t: int) -> str:
    return lens.inputs[row][t] if lens.inputs is not None else str(t)


def _guesses(lens: LogitLens, layer: int, row: int, t: int) -> str:
    k = lens.ids.shape[-1]
    return ", ".join(f"{_token(lens, layer, row, t, r)} {float(lens.probs[layer, row, t, r]):.3f}" for r in range(k))
