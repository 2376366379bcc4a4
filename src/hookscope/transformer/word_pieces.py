"""Tokens into words, for token attributions: each row's tokens (padding left out), which of them are
special, and the words their pieces make with the summed scores.

A fast tokenizer's batch (``BatchEncoding``) knows its tokens and word ids; without one the pieces
are read from the ids (``tokenizer.convert_ids_to_tokens``, else the ids themselves) and BERT's
``##`` continuation rule joins them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

Rows = tuple[list[list[str]], list[Tensor], list[list[str]], list[Tensor]]  # tokens, scores, words, word scores


def merge_words(
    tokens: Sequence[str], scores: Tensor, word_ids: Sequence[int | None] | None = None
) -> tuple[list[str], Tensor]:
    """Words and their summed scores from word pieces: pieces with one word id, or ``##`` pieces, join the one before.

    A token whose word id is None (a special token) is a word of its own. The word's text is its
    pieces joined, ``##`` dropped (``un ##believ ##ably`` -> ``unbelievably``).

    Args:
        tokens: one row's tokens.
        scores: ``(tokens,)``: their scores.
        word_ids: each token's word (None for a special token); None reads the ``##`` rule.

    Returns:
        The words, and a ``(words,)`` tensor of their pieces' summed scores.
    """
    groups: list[list[int]] = []
    for i, token in enumerate(tokens):
        if word_ids is not None:
            joins = i > 0 and word_ids[i] is not None and word_ids[i] == word_ids[i - 1]
        else:
            joins = i > 0 and token.startswith("##")
        if joins:
            groups[-1].append(i)
        else:
            groups.append([i])
    words = [tokens[g[0]] + "".join(tokens[j].removeprefix("##") for j in g[1:]) for g in groups]
    sums = [scores[g].sum() for g in groups]
    return words, torch.stack(sums) if sums else scores.new_zeros(0)


def special(inputs: Any, tokenizer: Any, ids: Tensor) -> Tensor:
    """``(B, T)``: True at the special tokens ([CLS], [SEP]...), which the ``"pad"`` baseline keeps.

    Args:
        inputs: a tokenizer's batch or the ids.
        tokenizer: the tokenizer (its ``all_special_ids``) when ``inputs`` is not a fast tokenizer's batch.
        ids: ``(B, T)``: the input ids.

    Returns:
        A bool tensor shaped like ``ids``.
    """
    if is_fast(inputs):
        return torch.tensor([[w is None for w in inputs.word_ids(row)] for row in range(len(ids))], device=ids.device)
    kept = list(getattr(tokenizer, "all_special_ids", []) or [])
    return torch.isin(ids, torch.tensor(kept, dtype=ids.dtype, device=ids.device))


def is_fast(inputs: Any) -> bool:
    """Whether ``inputs`` is a fast tokenizer's batch, which names its tokens and their words.

    Args:
        inputs: a tokenizer's batch or the ids.

    Returns:
        True when it has ``word_ids()``.
    """
    return bool(getattr(inputs, "is_fast", False)) and callable(getattr(inputs, "word_ids", None))


def per_row(attributions: Tensor, inputs: Any, tokenizer: Any, ids: Tensor) -> Rows:
    """Tokens, scores, words and word scores of each row, padding (``attention_mask == 0``) left out.

    Args:
        attributions: ``(B, T)``: every position's score.
        inputs: a tokenizer's batch or the ids.
        tokenizer: names the tokens when ``inputs`` cannot; None: the ids as text.
        ids: ``(B, T)``: the input ids.

    Returns:
        ``(tokens, scores, words, word_scores)``, a list entry per row.
    """
    mask = inputs.get("attention_mask") if isinstance(inputs, Mapping) else None
    all_tokens: list[list[str]] = []
    all_scores: list[Tensor] = []
    all_words: list[list[str]] = []
    all_word_scores: list[Tensor] = []
    for row in range(len(ids)):
        kept = torch.ones(ids.shape[1], dtype=torch.bool) if mask is None else mask[row].cpu().bool()
        if is_fast(inputs):
            tokens, word_ids = list(inputs.tokens(row)), list(inputs.word_ids(row))
        elif tokenizer is not None:
            tokens, word_ids = list(tokenizer.convert_ids_to_tokens(ids[row].tolist())), None
        else:
            tokens, word_ids = [str(i) for i in ids[row].tolist()], None
        where = kept.nonzero().flatten().tolist()
        scores = attributions[row].cpu()[where]
        tokens = [tokens[i] for i in where]
        words, word_scores = merge_words(tokens, scores, None if word_ids is None else [word_ids[i] for i in where])
        all_tokens.append(tokens)
        all_scores.append(scores)
        all_words.append(words)
        all_word_scores.append(word_scores)
    return all_tokens, all_scores, all_words, all_word_scores
