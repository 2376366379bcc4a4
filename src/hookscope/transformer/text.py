"""Text in, tokens out: sentences through a tokenizer, and word pieces grouped back into words.

::

    batch = encode(tokenizer, ["The cat sat.", "Hi"])     # a padded BatchEncoding of tensors
    encoded("Hi", tokenizer, caller="attention")          # text encoded; ids and batches as they are
    tokens_of(batch, tokenizer)                           # [['[CLS]', 'the', 'cat', ...], ['[CLS]', 'hi', ...]]
    word_groups(['[CLS]', 'play', '##ing', '[SEP]'])       # [('[CLS]', [0]), ('playing', [1, 2]), ('[SEP]', [3])]

``word_groups`` is the one place word pieces become words, for every view that shows words
(attention, attributions): it follows the tokenizer's own ``word_ids`` when there are some,
else the markers of the three common schemes: WordPiece continues a word with ``##``, GPT-2's
byte-level BPE starts one with ``Ġ`` and SentencePiece with ``▁``. Special tokens and padding
(``[CLS]``, ``<|endoftext|>``, ``<pad>``...) are words of their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor, nn

from ..errors import InputError, OptionError

Groups = list[tuple[str, list[int]]]
MAX_LENGTH = 512  # tokens a sentence is cut to, BERT's window


def encode(tokenizer: Any, text: str | Sequence[str], *, max_length: int = MAX_LENGTH) -> Any:
    """``text`` (one string or several, a batch) as the padded tensors ``tokenizer`` makes (a ``BatchEncoding``)."""
    texts = [text] if isinstance(text, str) else list(text)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise InputError("expected a string or a non-empty list of strings to tokenize")
    if getattr(tokenizer, "pad_token", None) is None:
        tokenizer.pad_token = tokenizer.eos_token  # GPT-2 ships without one; its end token pads, as HF suggests
    return tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")


def encoded(inputs: Any, tokenizer: Any, *, caller: str) -> Any:
    """Text (a string or a list of strings) through ``tokenizer`` (``encode``); anything else as it is.

    Text without a tokenizer is an ``InputError`` naming ``caller``'s ``tokenizer=``.
    """
    if not (isinstance(inputs, str) or (isinstance(inputs, Sequence) and inputs and isinstance(inputs[0], str))):
        return inputs
    if tokenizer is None:
        raise InputError(f"text needs tokenizer=: hookscope.{caller}(model, text, ..., tokenizer=tokenizer)")
    return encode(tokenizer, inputs)


def model_part(model: nn.Module, getter: str, advice: str) -> nn.Module:
    """What a Hugging Face model's ``getter`` (``get_input_embeddings``...) returns, or an OptionError:
    ``"{Model} has no {advice}"``, where ``advice`` names the getter and the option that replaces it."""
    get = getattr(model, getter, None)
    part = get() if callable(get) else None
    if not isinstance(part, nn.Module):
        raise OptionError(f"{type(model).__name__} has no {advice}")
    return part


def tokens_of(inputs: Any, tokenizer: Any = None) -> list[list[str]]:
    """The tokens of each sequence of ``inputs``, as the tokenizer wrote them (positions when nothing names them)."""
    ids = input_ids(inputs)
    if ids is None:
        return []
    if hasattr(inputs, "tokens") and getattr(inputs, "is_fast", False):
        return [list(inputs.tokens(b)) for b in range(ids.shape[0])]
    if tokenizer is not None:
        return [list(tokenizer.convert_ids_to_tokens(row.tolist())) for row in ids]
    return [[str(int(i)) for i in row] for row in ids]


def word_ids_of(inputs: Any) -> list[list[int | None]] | None:
    """The tokenizer's word index of each token (None for special tokens), where a fast tokenizer kept them."""
    ids = input_ids(inputs)
    if ids is None or not getattr(inputs, "is_fast", False):
        return None
    return [list(inputs.word_ids(b)) for b in range(ids.shape[0])]


def input_ids(inputs: Any) -> Tensor | None:
    """The ``(B, T)`` token ids of a model input: a tensor of ids, or a mapping's ``input_ids``."""
    ids = inputs.get("input_ids") if isinstance(inputs, Mapping) else inputs
    if isinstance(ids, Tensor) and ids.dim() == 2 and not ids.is_floating_point():
        return ids
    return None


def word_groups(tokens: Sequence[str], word_ids: Sequence[int | None] | None = None) -> Groups:
    """``[(word, [token positions])]`` in order: word pieces merged into the words they spell (see module doc)."""
    groups: Groups = []
    previous: object = object()
    for position, token in enumerate(tokens):
        if word_ids is not None:
            word = word_ids[position]
            starts = word is None or word != previous
            previous = word if word is not None else object()
        else:
            starts = _starts_word(token, position, tokens)
        if starts or not groups:
            groups.append((_strip(token), [position]))
        else:
            text, members = groups[-1]
            groups[-1] = (text + _strip(token), [*members, position])
    return groups


def _starts_word(token: str, position: int, tokens: Sequence[str]) -> bool:
    if is_special(token) or position == 0 or is_special(tokens[position - 1]):
        return True
    if token.startswith("##"):
        return False
    marked = any(t[:1] in ("Ġ", "▁") for t in tokens)
    return not marked or token[:1] in ("Ġ", "▁")


def _strip(token: str) -> str:
    if token.startswith("##") and len(token) > 2:
        return token[2:]
    return token[1:] if token[:1] in ("Ġ", "▁") and len(token) > 1 else token


def is_special(token: str) -> bool:
    """``[CLS]``, ``<s>``, ``<|endoftext|>``, ``<pad>``: a token in brackets, which no word contains."""
    return len(token) > 2 and (token[0], token[-1]) in (("[", "]"), ("<", ">"))
