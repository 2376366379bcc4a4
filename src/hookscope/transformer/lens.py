"""The logit lens: what a decoder would predict if it stopped after each block.

::

    lens = logit_lens(model, input_ids, norm=model.transformer.ln_f, unembed=model.lm_head, k=5)
    lens.ids[-1]      # (B, T, k) top-k token ids after the last block: the model's own top-k
    lens.probs[0]     # (B, T, k) their probabilities after the first block
    lens.tokens       # the same as strings, [layer][batch][position][rank], with tokenizer=

Each selected block's output (its first tensor, the residual stream) goes through the final norm
and the unembedding exactly as the model sends its last hidden state: ``unembed(norm(h))``, then a
softmax over the vocabulary (nostalgebraist 2020). The user names both, because models call them
differently (``transformer.ln_f`` and ``lm_head`` on GPT-2, ``model.norm`` and ``lm_head`` on
Llama). On GPT-2 the last block's lens is the model's logits, bit for bit; a model whose last
block is followed by more than ``norm`` (a projection, a soft cap) differs there.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..core.capture import capture
from ..core.select import Selector, select_modules
from ..display import Shows, shows_as
from ..errors import OptionError

Head = Callable[[Tensor], Tensor]  # a module or a function: (B, T, D) -> (B, T, D) or (B, T, V)


@dataclass(eq=False)
class LogitLens(Shows):
    """Top-k next-token guesses after each block: ``ids`` and ``probs`` are ``(layers, B, T, k)``."""

    layers: list[str]
    ids: Tensor
    probs: Tensor
    inputs: list[list[str]] | None = None  # the input tokens per row, with a tokenizer
    tokens: list[list[list[list[str]]]] | None = None  # [layer][row][position][rank], with a tokenizer

    def __repr__(self) -> str:
        layers, batch, length, k = self.ids.shape
        return f"<LogitLens: {layers} layers x {batch} rows x {length} positions, top {k}>"


def logit_lens(
    model: nn.Module,
    input_ids: Tensor | Mapping[str, Any],
    *,
    unembed: Head,
    norm: Head | None = None,
    blocks: Selector = ":blocks",
    k: int = 5,
    tokenizer: Any = None,
) -> LogitLens:
    """The logit lens of ``model`` on ``input_ids`` (a tensor, or a tokenizer's dict) at ``blocks``.

    ``blocks`` selects the residual blocks (``":blocks"``: the model's repeated blocks,
    ``transformer.h.0`` ... on GPT-2); a selected module inside another selected one is left out,
    so ``"transformer.h.*"`` means the blocks, not their parts. ``norm`` (None: none) and
    ``unembed`` are applied to each block's output. ``tokenizer`` turns the ids into strings.
    """
    if not isinstance(k, int) or k < 1:
        raise OptionError(f"k must be a positive int, got {k!r}")
    names = outermost([name for name, _ in select_modules(model, blocks)])
    with capture(model, names) as cap, torch.no_grad():
        if isinstance(input_ids, Mapping):
            model(**input_ids)
        else:
            model(input_ids)
    values, indices = [], []
    with torch.no_grad():
        for name in names:  # one layer's (B, T, V) probabilities at a time
            probs = lens_probs(cap[name].first("output"), unembed, norm)
            if probs.shape[-1] < k:
                raise OptionError(f"k={k} is more than the {probs.shape[-1]} entries of the unembedding's output")
            top = probs.topk(k, dim=-1)
            values.append(top.values)
            indices.append(top.indices)
    lens = LogitLens(names, torch.stack(indices), torch.stack(values))
    if tokenizer is not None:
        ids = input_ids["input_ids"] if isinstance(input_ids, Mapping) else input_ids
        lens.inputs = [tokenizer.convert_ids_to_tokens(row) for row in ids.tolist()]
        lens.tokens = [
            [[tokenizer.convert_ids_to_tokens(r) for r in row] for row in layer] for layer in lens.ids.tolist()
        ]
    return lens


def lens_probs(hidden: Tensor, unembed: Head, norm: Head | None = None) -> Tensor:
    """``softmax(unembed(norm(hidden)))`` over the last axis: ``(B, T, D)`` -> ``(B, T, V)``."""
    logits = unembed(hidden if norm is None else norm(hidden))
    return torch.softmax(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, dim=-1)


def outermost(names: list[str]) -> list[str]:
    """``names`` without those inside another of them (``h.0.attn`` goes when ``h.0`` is there)."""
    return [n for n in names if not any(n.startswith(f"{o}.") for o in names if o != n and o != "")]


@shows_as(LogitLens)
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
