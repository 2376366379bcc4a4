"""Token attributions: how much each token counts for one number computed from a model's output.

::

    result = token_attribution(model, enc, similarity, steps=32)   # enc: a tokenizer's batch
    result.words[0], result.word_scores[0]    # per word of the first text (word pieces summed)
    result.delta                              # sum of attributions - (f(x) - f(baseline))
    print(result.table()); result.plot()      # a line per token; the tokens coloured by their scores

Token ids cannot be differentiated, so the attributions are taken at the output of
``model.get_input_embeddings()`` (Captum's answer too, captum#1237, its LayerIntegratedGradients
reusing IntegratedGradients): a forward hook replaces that output with a point of the path from
the baseline to the real embeddings, and ``hookscope.explain.attribute.attribute_through`` runs
``hookscope.attribute``'s own integrated gradients (its Gauss-Legendre rule, so the sums match
Captum's) or input x gradient over that forward:

    integrated_gradients  (x - x') * sum_s w_s d f / d e at x' + a_s (x - x')   (Sundararajan et al. 2017)
    input_x_gradient      x * d f / d e at x

``f`` is the ``target``: a callable of the model's output returning one number for the whole
batch (for a sentence-embedding model, the cosine similarity of two texts) or one per row (their
sum is explained), or a class index (an int, one per row, a tensor) of the output's logits, as
``hookscope.attribute`` reads it (fixed on the real inputs). Each step runs the whole batch in one
forward and one backward. Each token's score is the sum over the embedding axis; words sum their
pieces (the fast tokenizer's ``word_ids()``, else BERT's ``##`` continuation rule). Padding
(``attention_mask == 0``) is left out of the lists.

Baselines: ``"pad"`` (the default) gives every token the embedding of the pad token and leaves
special tokens ([CLS], [SEP]) as they are, so they score 0 and the attributions fall on the
text (Captum's BERT tutorial does the same); ``"zeros"`` is the zero vector; a tensor is
broadcast to the embeddings (``hookscope.attribute``'s rule). The embedding module is called on
the baseline's ids (the model's other inputs stay).

The result and its faces are ``hookscope.transformer.token_scores``; tokens into words,
``hookscope.transformer.word_pieces``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Literal, Union

import torch
from torch import Tensor, nn

from ..base.deprecation import renamed, warn_renamed
from ..core.hooks import HandleGroup
from ..errors import OptionError
from ..explain.attribute import attribute_through
from ..explain.baselines import make_baseline
from ..explain.targets import Target, call_target, rows, scores
from ..progress import Progress
from .text import encoded, model_part
from .token_scores import TokenAttribution
from .word_pieces import per_row, special

Method = Literal["integrated_gradients", "input_x_gradient"]
METHODS: tuple[str, ...] = ("integrated_gradients", "input_x_gradient")
Baseline = Union[Literal["pad", "zeros"], Tensor]
Inputs = Union[Tensor, Mapping[str, Any]]  # input ids, or a tokenizer's batch (BatchEncoding)
Scalar = Callable[[Any], Tensor]  # model output -> one number, or one per row


@renamed(scalar_fn="target")
def token_attribution(
    model: nn.Module,
    inputs: Inputs | str | Sequence[str],
    target: Scalar | Target,
    *,
    method: Method = "integrated_gradients",
    steps: int = 50,
    baseline: Baseline = "pad",
    tokenizer: Any = None,
    embeddings: nn.Module | None = None,
    rows: Sequence[int] | None = None,
    output: str | None = None,
    progress: Progress = None,
) -> TokenAttribution:
    """Attributions of ``target`` (of ``model(**inputs)``) to each token's embedding (see the module doc).

    ``inputs`` is a tokenizer's batch (a fast tokenizer's keeps its tokens and word ids), a tensor
    of ids, or text with ``tokenizer=``. ``tokenizer`` names the tokens when ``inputs`` cannot, and
    its special tokens are kept in the ``"pad"`` baseline. ``embeddings`` is the module whose output
    is attributed (default ``model.get_input_embeddings()``). ``rows`` (integrated gradients)
    attributes those rows only: the others keep their own embeddings in the baseline and score 0
    (``rows=[0]``: which words of text 0 make it similar to text 1). ``steps`` (50, as Captum's
    ``n_steps``) points run one forward and one backward each. ``output`` names the tensor of a
    structured model output the target reads (``"logits"``; None: a callable gets the whole output,
    a class index the first tensor). ``progress`` (``hookscope.progress``; default quiet) hears
    ``(method, done, total)`` after each step through the model. ``scalar_fn=`` is the old name of
    ``target=`` and ``method="ig"`` of ``"integrated_gradients"`` (both deprecated).

    Args:
        model: the transformer.
        inputs: a tokenizer's batch, a tensor of ids, or text with ``tokenizer``.
        target: the scalar explained: a callable on the output, or a class index (an int, a list, a tensor).
        method: ``integrated_gradients`` (the default) or ``input_x_gradient``.
        steps: integrated gradients' points, one forward and one backward each.
        baseline: ``pad`` (the tokens replaced by the pad token, special tokens kept), ``zeros``, or a
            tensor shaped like the embeddings.
        tokenizer: encodes text, names the tokens and gives the pad id; None when ``inputs`` suffice.
        embeddings: the module whose output is attributed; None is ``model.get_input_embeddings()``.
        rows: with integrated gradients, attribute these rows only; None attributes every row.
        output: the tensor of a structured model output the target reads; None as above.
        progress: None or False (quiet), True (lines on stderr), a stream, or a callable
            ``(stage, done, total)`` (``hookscope.progress``).

    Returns:
        A ``TokenAttribution``, per token and per word, for every row.

    Raises:
        OptionError: an unknown method or baseline, a bad ``steps``, ``pad`` without a pad id, or no
            ``embeddings`` given to a model without ``get_input_embeddings()``.
        InputError: text without ``tokenizer``.
        TargetError: ``target`` does not fit the model's output.
    """
    if str(method) == "ig":
        old, new = "token_attribution(method='ig')", "token_attribution(method='integrated_gradients')"
        warn_renamed(old, new, stacklevel=3)  # the caller of renamed's wrapper
        method = "integrated_gradients"
    if method not in METHODS:
        raise OptionError(f"method={method!r} is not a token attribution method; use {' or '.join(map(repr, METHODS))}")
    if not isinstance(steps, int) or steps < 1:
        raise OptionError(f"steps must be a positive int, got {steps!r}")
    batch: Inputs = encoded(inputs, tokenizer, caller="token_attribution")
    layer = embeddings if embeddings is not None else _input_embeddings(model)
    ids = batch if isinstance(batch, Tensor) else batch["input_ids"]
    with torch.inference_mode(False), torch.no_grad():
        first, x = _run(model, batch, layer, None)
    forward = partial(_explained, model, batch, layer, _as_function(target, first, output), len(x))
    with torch.inference_mode(False), torch.no_grad():
        value = float(forward(x).sum())
    base = None
    if method == "integrated_gradients":
        base = _baseline(baseline, layer, x, ids, special(batch, tokenizer, ids), _pad_id(model, tokenizer))
        base = _only_rows(base, x, rows)
    attr, _ = attribute_through(
        forward, x, method, _itself, baseline=base, steps=steps, batch_size=len(x), progress=progress
    )
    per_token = attr.sum(dim=-1).detach()  # (B, T)
    base_value, delta = None, None
    if base is not None:
        with torch.inference_mode(False), torch.no_grad():
            base_value = float(forward(base).sum())
        delta = float(per_token.sum()) - (value - base_value)
    listed = per_row(per_token, batch, tokenizer, ids)  # tokens, scores, words, word scores
    return TokenAttribution(*listed, per_token, value, base_value, delta, method, steps)


def _as_function(target: Scalar | Target, first: Any, key: str | None) -> Scalar:
    """The target as a function of the model's output (``hookscope.explain.targets.call_target``'s
    contract, ``key`` the tensor it reads when given): a callable as it is; a class as its logit, the
    class fixed on the real inputs' output ``first`` (as ``hookscope.attribute`` does)."""
    if callable(target) and not isinstance(target, Tensor):
        function: Scalar = target
        return lambda out: call_target(function, out, rows(out, key), key=key, caller="token_attribution()")
    _, index = scores(first, target, key)
    return lambda out: scores(out, index, key)[0]


def _explained(model: nn.Module, inputs: Inputs, layer: nn.Module, target: Scalar, rows: int, point: Tensor) -> Tensor:
    """``(B,)``: the target of the model's output with ``layer``'s output replaced by ``point``; one
    number for the batch sits in row 0 (the rows' sum is what is explained)."""
    value = target(_run(model, inputs, layer, point)[0])
    if value.dim() == 1:
        return value
    return torch.cat([value.reshape(1), value.new_zeros(rows - 1)])


def _itself(scores: Tensor) -> Tensor:
    return scores


def _run(model: nn.Module, inputs: Inputs, layer: nn.Module, point: Tensor | None) -> tuple[Any, Tensor]:
    """The model's output with ``layer``'s output replaced by ``point`` (None: kept), and what
    ``layer`` computed itself."""
    seen: list[Tensor] = []

    def replace(module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        seen.append(output)
        return point

    handles = HandleGroup()
    try:
        handles.on_forward(layer, replace)
        output = model(inputs) if isinstance(inputs, Tensor) else model(**inputs)
    finally:
        handles.remove()
    if not seen:
        raise OptionError(f"the model never called its embedding module {type(layer).__name__}; pass embeddings=")
    return output, seen[0].detach()


def _input_embeddings(model: nn.Module) -> nn.Module:
    return model_part(
        model, "get_input_embeddings", "get_input_embeddings(); pass embeddings=<its token embedding module>"
    )


def _baseline(baseline: Baseline, layer: nn.Module, x: Tensor, ids: Tensor, keep: Tensor, pad: int | None) -> Tensor:
    """The starting point of the path, with the embeddings' shape (see the module doc)."""
    if isinstance(baseline, Tensor) or baseline == "zeros":
        return make_baseline(x, baseline)
    if baseline != "pad":
        raise OptionError(
            f"baseline={baseline!r} is not a baseline; pass 'pad', 'zeros' or a tensor shaped like the embeddings"
        )
    if pad is None:
        raise OptionError("baseline='pad' needs a pad token id: pass tokenizer=, or baseline='zeros'")
    with torch.no_grad():
        embedded: Tensor = layer(torch.where(keep, ids, torch.full_like(ids, pad)))
    return embedded.detach().to(x)


def _only_rows(base: Tensor, x: Tensor, rows: Sequence[int] | None) -> Tensor:
    """``base`` in ``rows``, ``x`` in the other rows (None: ``base`` everywhere)."""
    if rows is None:
        return base
    chosen = torch.zeros(len(x), dtype=torch.bool, device=x.device)
    try:
        chosen[torch.as_tensor(list(rows), dtype=torch.long, device=x.device)] = True
    except (IndexError, TypeError, ValueError, RuntimeError) as err:
        raise OptionError(f"rows={rows!r} must be indices of the {len(x)} input rows") from err
    return torch.where(chosen.view(-1, *[1] * (x.dim() - 1)), base, x)


def _pad_id(model: nn.Module, tokenizer: Any) -> int | None:
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(getattr(model, "config", None), "pad_token_id", None)
    return None if pad is None else int(pad)
