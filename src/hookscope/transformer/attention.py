"""Attention weights of a transformer, from whatever attention implementation it runs.

::

    att = hookscope.attention(model, tokenizer(["The cat sat.", "Hi"], padding=True, return_tensors="pt"))
    att.layers                       # ['encoder.layer.0.attention.self', ...], in forward order
    att.weights("encoder.layer.3")   # (B, heads, T, T): row i is where token i looks; rows sum to 1
    att.tokens[0], att.mask[0]       # the tokens as the tokenizer wrote them; True = a real token
    att.output                       # what the model returned, the same as outside (bit for bit)
    att = hookscope.attention(encoder, {"src": x, "src_key_padding_mask": pad})   # torch's own layers

The model runs once, under ``torch.no_grad()``, with its own attention implementation (SDPA by
default): :mod:`hookscope.transformer.recorder` explains how the weights are read without
switching it to eager. Padding is honoured: a padded key gets weight 0 in every row, and the
rows of padded queries are there (what the model computed) but mean nothing; ``mask`` says which
they are. Causal models (GPT-2) have zeros above the diagonal.

DeBERTa-v2, GPT-Neo, BLOOM and Falcon compute attention in their own modules, outside the
interface: their weights are the ones each module returns with ``output_attentions=True``
(:mod:`hookscope.transformer.own`), the model's outputs unchanged; load them with
``attn_implementation="eager"`` (Falcon's SDPA is refused with that fix).

A model of torch's own ``nn.MultiheadAttention`` (``nn.TransformerEncoder``, a bare module) has
no attention registry: its weights are torch's own, from each module run once more with
``need_weights=True`` (``hookscope.transformer.rollout.MultiheadWeights``). The hooks turn off
``nn.TransformerEncoderLayer``'s fused fast path, so its outputs differ from a hook-free run by
what the fused kernel does differently (5e-7 in float32, 1e-15 in float64).

Linear-attention layers (GatedDeltaNet, Mamba; :mod:`hookscope.transformer.readers`) have no
attention matrix: on a hybrid model (Qwen3-Next, Qwen3.5) a warning names them and points to
``hookscope.linear_attention``; a model of such layers only is refused with the same advice.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..base.deprecation import renamed
from ..base.display import Shows, plot_of, table_of
from ..base.words import closest
from ..core.compiled import named_modules
from ..core.select import Selector, modules_under
from ..errors import CaptureError, CaptureWarning, NotCapturedError, SelectionError
from .own import OwnAttention, own_attention_modules
from .readers import linear_layers
from .recorder import implementations, recording
from .rollout import MultiheadWeights
from .text import Groups, encoded, input_ids, tokens_of, word_groups, word_ids_of

if TYPE_CHECKING:
    from PIL.Image import Image


@dataclass(frozen=True, repr=False)
class Attention(Shows):
    """The attention probabilities of each attention call of one forward pass, with its tokens.

    Attributes:
        layers: the attention modules in forward order; a shared module's later calls are ``name#1``, ...
        tokens: per sequence, its tokens as the tokenizer wrote them (padding included), or positions.
        mask: ``(B, T)`` bool: True for a real token, False for padding.
        output: what the model returned.
        word_ids: a fast tokenizer's word index per token, or None.
        probs: layer -> its attention probabilities ``(B, heads, Tq, Tk)``.
    """

    layers: list[str]  # attention modules in forward order; a shared module's later calls are 'name#1', ...
    tokens: list[list[str]]  # per sequence, as the tokenizer wrote them (padding included)
    mask: Tensor  # (B, T) bool: True for a real token, False for padding
    output: Any = None  # what the model returned
    word_ids: list[list[int | None]] | None = None  # a fast tokenizer's word index per token
    probs: dict[str, Tensor] = field(default_factory=dict)  # layer -> (B, heads, Tq, Tk)

    def weights(self, layer: str | int) -> Tensor:
        """``(B, heads, Tq, Tk)`` of one layer: its name, the block holding it, or its index in ``layers``.

        Args:
            layer: a name in ``layers``, the block holding one attention, or an index into ``layers``.

        Returns:
            ``(B, heads, Tq, Tk)`` attention probabilities.

        Raises:
            NotCapturedError: no attention ran at ``layer``, or the index is out of range.
            SelectionError: ``layer`` holds several attention modules.
        """
        return self.probs[self.layer_name(layer)]

    def layer_name(self, layer: str | int) -> str:
        """The name in ``layers`` that ``layer`` means (an index, a name, or the one attention under a block).

        Args:
            layer: a name in ``layers``, the block holding one attention, or an index into ``layers``.

        Returns:
            The name in ``layers``.

        Raises:
            NotCapturedError: no attention ran at ``layer``, or the index is out of range.
            SelectionError: ``layer`` holds several attention modules.
        """
        if isinstance(layer, int) and not isinstance(layer, bool):
            if not -len(self.layers) <= layer < len(self.layers):
                raise NotCapturedError(f"layer {layer} is out of range: {len(self.layers)} attention layers ran")
            return self.layers[layer]
        if layer in self.probs:
            return str(layer)
        under = [name for name in self.layers if name.startswith(f"{layer}.") and "#" not in name]
        if len(under) == 1:
            return under[0]
        if under:
            raise SelectionError(f"{layer!r} holds {len(under)} attention modules ({', '.join(under)}); name one")
        raise NotCapturedError(
            f"no attention ran at {layer!r}{closest(str(layer), self.layers)}; att.layers lists the {len(self.layers)} "
            "that did"
        )

    @property
    def heads(self) -> int:
        """Heads of the first layer."""
        return int(next(iter(self.probs.values())).shape[1]) if self.probs else 0

    def mean_heads(self, layer: str | int) -> Tensor:
        """``(B, Tq, Tk)``: the layer's weights averaged over its heads (rows still sum to 1).

        Args:
            layer: a name in ``layers``, the block holding one attention, or an index into ``layers``.

        Returns:
            The head mean, ``(B, Tq, Tk)``.

        Raises:
            NotCapturedError: no attention ran at ``layer``.
        """
        return self.weights(layer).mean(dim=1)

    def real_tokens(self, batch: int = 0) -> list[str]:
        """Sequence ``batch``'s tokens without its padding.

        Args:
            batch: the sequence's index in the batch.

        Returns:
            Its tokens, padding left out.
        """
        return [t for t, keep in zip(self.tokens[batch], self.mask[batch].tolist(), strict=True) if keep]

    def words(self, batch: int = 0) -> Groups:
        """``[(word, [token positions])]`` of sequence ``batch``: word pieces merged (padding left out).

        Args:
            batch: the sequence's index in the batch.

        Returns:
            ``(word, [token positions])`` pairs, in order.
        """
        keep = self.mask[batch].tolist()
        ids = None if self.word_ids is None else self.word_ids[batch]
        groups = word_groups(self.tokens[batch], ids)
        return [(word, members) for word, members in groups if all(keep[i] for i in members)]

    def table(self, *, batch: int = 0) -> str:
        """A line per layer: its heads, the weights' shape, and the token sequence ``batch`` looks at most.

        Args:
            batch: the sequence described.

        Returns:
            The table, as text.

        Raises:
            OptionError: ``batch`` is out of range.
        """
        return table_of(self, batch=batch)

    def plot(
        self,
        layer: str | int = 0,
        *,
        batch: int = 0,
        heads: Sequence[int] | None = None,
        columns: int = 7,
        mean: bool = True,
    ) -> Image:
        """A PIL image of ``layer``'s heads and their mean: what ``hookscope.attention_grid(att, layer, ...)`` draws.

        Args:
            layer: a name in ``layers``, the block holding one attention, or an index (default: the first).
            batch: the sequence drawn.
            heads: the heads drawn; None draws all.
            columns: panels per row.
            mean: add a panel of the heads' mean.

        Returns:
            A PIL image.

        Raises:
            OptionError: ``batch`` or a head is out of range.
            NotCapturedError: no attention ran at ``layer``.
        """
        return plot_of(self, layer=layer, batch=batch, heads=heads, columns=columns, mean=mean)

    def __repr__(self) -> str:
        size = tuple(self.mask.shape)
        return f"<Attention: {len(self.layers)} layers, {self.heads} heads, batch x tokens {size}>"


@renamed(layers="select")
def attention(
    model: nn.Module,
    inputs: Any,
    *,
    select: Selector | None = None,
    tokenizer: Any = None,
) -> Attention:
    """Run ``model`` on ``inputs`` once and return the attention of every attention call (see module doc).

    ``inputs`` is what the model takes: a tokenizer's ``BatchEncoding`` or a dict (passed as
    keyword arguments), a ``(B, T)`` tensor of token ids, or text (a string or a list of strings,
    a batch) with ``tokenizer=``, which pads it. ``select`` selects modules as ``hookscope.capture``
    does; an attention is kept when it or a module above it is selected (``"encoder.layer.1*"``);
    None (the default) keeps every attention module the model ran. ``layers=`` is the old name of
    ``select=`` (deprecated).
    Attention probabilities are those of the softmax before dropout; call it in ``eval()`` mode.

    Args:
        model: the transformer, in eval mode.
        inputs: a ``BatchEncoding`` or dict, a ``(B, T)`` tensor of token ids, or text with ``tokenizer``.
        select: which attention modules are kept (see above); None keeps every one that ran.
        tokenizer: encodes text and names the tokens; None when ``inputs`` are already encoded.

    Returns:
        An ``Attention``, the probabilities of each attention call, with the tokens and padding mask.

    Raises:
        InputError: text without ``tokenizer``.
        SelectionError: ``select`` matches no module.
        CaptureError: no selected attention module ran (a model of linear-attention layers only: named).
    """
    inputs = encoded(inputs, tokenizer, caller="attention")
    wanted = _wanted(model, select)
    order: list[str] = []
    probs: dict[str, Tensor] = {}

    def record(module: nn.Module, weights: Tensor) -> None:
        name = wanted.get(id(module))
        if name is not None:
            label = name if name not in probs else f"{name}#{sum(n.split('#')[0] == name for n in order)}"
            order.append(label)
            probs[label] = weights

    own = own_attention_modules(model)
    if not implementations(model) and any(isinstance(m, nn.MultiheadAttention) for m in model.modules()):
        output = _multihead(model, inputs, wanted, record)
    elif own:
        with OwnAttention(model, [(n, m) for n, m in own if id(m) in wanted], record), torch.no_grad():
            output = _call(model, inputs)
    else:
        with recording(model, record), torch.no_grad():
            output = _call(model, inputs)
    linear = [f"{name} ({kind})" for name, module, kind in linear_layers(model) if id(module) in wanted]
    if not order:
        raise CaptureError(_nothing_ran(model, select) if not linear else _linear_only(model, linear))
    if linear:
        warnings.warn(_no_matrix(linear), CaptureWarning, stacklevel=2)
    mask = _padding(inputs, probs[order[0]])
    positions = [[str(i) for i in range(mask.shape[1])] for _ in range(mask.shape[0])]
    return Attention(
        layers=order,
        tokens=tokens_of(inputs, tokenizer) or positions,  # no token ids: positions
        mask=mask,
        output=output,
        word_ids=word_ids_of(inputs),
        probs=probs,
    )


def _call(model: nn.Module, inputs: Any) -> Any:
    return model(**inputs) if isinstance(inputs, Mapping) else model(inputs)


def _multihead(model: nn.Module, inputs: Any, wanted: dict[int, str], record: Any) -> Any:
    """torch's ``nn.MultiheadAttention``: its own weights (``MultiheadWeights``), recorded in call order."""
    chosen = [n for n, m in model.named_modules() if isinstance(m, nn.MultiheadAttention) and id(m) in wanted]
    if not chosen:
        return None
    modules = dict(model.named_modules())
    with MultiheadWeights(model, chosen) as found, torch.no_grad():
        output = _call(model, inputs)
    for name, weights in found.weights:
        record(modules[name], weights)
    return output


def _wanted(model: nn.Module, select: Selector | None) -> dict[int, str]:
    """id(module) -> name for every module whose attention is kept."""
    kept = named_modules(model) if select is None else modules_under(model, select)  # a shared module: its first name
    return {id(m): n for n, m in kept}


def _padding(inputs: Any, first: Tensor) -> Tensor:
    """``(B, T)`` bool: the inputs' ``attention_mask``, or every token real."""
    mask = inputs.get("attention_mask") if isinstance(inputs, Mapping) else None
    if isinstance(mask, Tensor) and mask.dim() == 2:
        return mask.bool().cpu()
    padding = inputs.get("src_key_padding_mask") if isinstance(inputs, Mapping) else None
    if isinstance(padding, Tensor) and padding.dim() == 2:  # torch's: True marks padding
        return ~padding.bool().cpu()
    ids = input_ids(inputs)
    batch, length = ids.shape if ids is not None else (first.shape[0], first.shape[-1])
    return torch.ones(batch, length, dtype=torch.bool)


def _no_matrix(linear: list[str]) -> str:
    """``names have no attention matrix: they are linear-attention layers, ...; linear_attention shows ...``."""
    if len(linear) == 1:
        said, their = f"{linear[0]} has no attention matrix: it is a linear-attention layer", "its"
    else:
        said, their = f"{', '.join(linear)} have no attention matrix: they are linear-attention layers", "their"
    return (
        f"{said}, with a recurrent state; hookscope.linear_attention(model, inputs) shows {their} gates, decay, "
        "state norms and token mixing"
    )


def _linear_only(model: nn.Module, linear: list[str]) -> str:
    return f"no attention of {type(model).__name__} ran: {_no_matrix(linear)}"


def _nothing_ran(model: nn.Module, select: Selector | None) -> str:
    where = "" if select is None else f" under select={select!r}"
    return (
        f"no attention of {type(model).__name__} ran{where}: none through transformers' attention interface, "
        "none in a module returning output_attentions; check the selection, or the model computes attention "
        "its own way"
    )
