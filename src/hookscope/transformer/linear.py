"""What linear-attention layers do instead of attention: their gates, decay, state and implied token mixing.

::

    lin = hookscope.linear_attention(model, input_ids)    # Qwen3-Next, Qwen3.5 (GatedDeltaNet), Mamba
    lin.layers                                 # ['model.layers.0.linear_attn', ...], in forward order
    lin.layer(0).gates["beta"], lin.layer(0).gates["g"]  # (B, H, T): write strength, log decay
    lin.layer(0).decay                         # (B, H, T): what the state is multiplied by at each step
    lin.layer(0).state_norms                   # (B, H, T): the recurrent state's norm after each step
    lin.mixing(0)                              # (B, H, T, T): the token mixing the recurrence implies
    print(lin.table())                         # a row per layer

GatedDeltaNet and Mamba layers keep a recurrent state instead of comparing every query with
every key, so there is no softmax matrix to read. What exists is read here (see
:mod:`hookscope.transformer.recurrence` for the maths and :mod:`hookscope.transformer.readers`
for how the gates are read): per head (delta rule) or per channel (Mamba) the gates, the
decay of each step, the state's norm after each step, and the token-to-token matrix ``M`` for
which the recurrence's output is ``M @ values`` (``mixing``; lower-triangular, not a distribution).
The model runs once, under ``torch.no_grad()``, untouched: its output is what it returns outside.
``M`` takes ``(B, H, T, T)``: for a sequence longer than ``LONGEST`` tokens it is left out, with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..base.display import Shows, plot_of, table_of
from ..base.words import closest
from ..errors import NotCapturedError

if TYPE_CHECKING:
    from PIL.Image import Image

LONGEST = 512  # tokens: past this, the (B, H, T, T) mixing is left out


@dataclass(frozen=True)
class Recurrent:
    """One call of a linear-attention layer: what it has instead of an attention matrix.

    Attributes:
        name: the layer's name (a shared module's later calls: ``name#1``, ...).
        type: the layer's class name.
        kind: ``gated delta rule`` (GatedDeltaNet), ``selective scan`` (Mamba) or ``state space duality`` (Mamba2).
        gates: by their model names: ``beta`` and ``g`` ``(B, H, T)``; Mamba's ``dt`` ``(B, D, T)``, ``A``
            ``(D, N)``, ``B`` and ``C`` ``(B, T, N)``; Mamba2's ``dt`` ``(B, H, T)``, ``A`` ``(H,)``, ``B`` and ``C``
            ``(B, H, T, N)``.
        decay: ``(B, H, T)``: the factor the state is multiplied by at each step (``exp(g)``, ``exp(dt A)``;
            Mamba: per channel, ``exp(dt * max A)``, its slowest-forgetting state dimension).
        state_norms: ``(B, H, T)``: the state's norm after each step (Mamba: each channel's ``N`` numbers).
        values: what the recurrence mixes: ``(B, H, T, dv)`` values, Mamba's ``(B, D, T)`` channels, or Mamba2's
            ``(B, H, T, P)``.
        mixing: ``(B, H, T, T)`` with ``outputs = mixing @ values`` (Mamba and Mamba2: before ``D x`` and the
            gate; Mamba per channel), or None for a sequence longer than ``LONGEST``.
        output: what the layer returned.
    """

    name: str
    type: str
    kind: str
    gates: dict[str, Tensor]
    decay: Tensor
    state_norms: Tensor
    values: Tensor
    mixing: Tensor | None = None
    output: Any = None


@dataclass(frozen=True, repr=False)
class LinearAttention(Shows):
    """The linear-attention layers of one forward pass (see module doc).

    Attributes:
        layers: the layers' calls in forward order.
        calls: name -> its ``Recurrent``.
        tokens: per sequence, its tokens (positions when no ids name them).
        mask: ``(B, T)`` bool: True for a real token.
        output: what the model returned.
        remarks: what was left out or could not be read, one line each (also warned).
    """

    layers: list[str]
    calls: dict[str, Recurrent]
    tokens: list[list[str]]
    mask: Tensor
    output: Any = None
    remarks: list[str] = field(default_factory=list)

    def layer(self, layer: str | int) -> Recurrent:
        """One layer's call: by its name in ``layers`` or its index.

        Args:
            layer: a name in ``layers`` or an index into it.

        Returns:
            Its ``Recurrent``.

        Raises:
            NotCapturedError: no linear layer ran at ``layer``.
        """
        if isinstance(layer, int) and not isinstance(layer, bool):
            if not -len(self.layers) <= layer < len(self.layers):
                raise NotCapturedError(f"layer {layer} is out of range: {len(self.layers)} linear layers ran")
            return self.calls[self.layers[layer]]
        if layer not in self.calls:
            raise NotCapturedError(
                f"no linear-attention layer ran at {layer!r}{closest(str(layer), self.layers)}; .layers lists the "
                f"{len(self.layers)} that did"
            )
        return self.calls[layer]

    def mixing(self, layer: str | int) -> Tensor:
        """``(B, H, T, T)``: the token mixing ``layer``'s recurrence implies (``outputs = mixing @ values``).

        Args:
            layer: a name in ``layers`` or an index into it.

        Returns:
            The implied token-to-token matrix, zero above the diagonal.

        Raises:
            NotCapturedError: no linear layer ran at ``layer``, or the sequence was too long for it.
        """
        found = self.layer(layer)
        if found.mixing is None:
            raise NotCapturedError(f"{found.name}'s mixing was left out: the sequence is over {LONGEST} tokens")
        return found.mixing

    def table(self) -> str:
        """A row per layer: its kind, heads (or channels), mean gate, mean decay, last state norm, self-mixing.

        Returns:
            The table, as text.
        """
        return table_of(self)

    def plot(self, layer: str | int = 0, *, batch: int = 0) -> Image:
        """A PIL image of ``layer``: its mixing (the mean of its heads' magnitudes) and its state norms per step.

        Args:
            layer: a name in ``layers`` or an index (default: the first).
            batch: the sequence drawn.

        Returns:
            A PIL image.

        Raises:
            OptionError: ``batch`` is out of range.
            NotCapturedError: no linear layer ran at ``layer``.
        """
        return plot_of(self, layer=layer, batch=batch)

    def __repr__(self) -> str:
        kinds = sorted({call.kind for call in self.calls.values()})
        size = tuple(self.mask.shape)
        return f"<LinearAttention: {len(self.layers)} layers ({', '.join(kinds)}), batch x tokens {size}>"
