"""Attention rollout for vision transformers (Abnar & Zuidema 2020): where the class token looks.

::

    result = attention_rollout(model, x)            # a Rollout
    result.maps                                     # (B, h, w) on the patch grid, each image's max 1
    hookscope.overlay(photo, result.maps[0])        # over the picture, like a CAM (result.plot(photo) draws it)
    print(result.table())                           # per image: the peak patch and the spread

Per layer the heads are fused (their mean, max or min), the residual is added as the identity
and the rows renormalised; the layers are multiplied through, first layer on the right:

    A_l = rownorm(fuse(W_l) + I),   R = A_L ... A_2 A_1,   heat = R[cls, patches] on the grid

``discard_ratio`` zeroes that fraction of the smallest weights of each fused row before the
identity is added (the class-token column is always kept), as jacobgil/vit-explain does.

The weights come from the model's ``nn.MultiheadAttention`` modules (torchvision's
``VisionTransformer``; timm's own attention class is not one). torchvision calls them with
``need_weights=False``, so the block below runs each module once more inside its forward hook,
with the same arguments and ``need_weights=True, average_attn_weights=False``, under no_grad:
the weights are torch's own, and the model's output is untouched (the hook returns nothing; the
tests check it is bit-identical). Put the model in eval mode: in training, attention dropout
would make the weights random.

Linear-attention layers (GatedDeltaNet, Mamba) have no attention matrix, and what they imply
(:mod:`hookscope.transformer.recurrence`) is no distribution: its rows need not sum to 1 and may
be negative, so it cannot be fused into the product. A selected one is refused by name. On a
hybrid model ``select=None`` is refused too: the rollout of its softmax layers alone would pass
over token mixing the model does, and look like a complete answer. Naming the attention modules
with ``select=`` rolls them out all the same, with a warning that names the layers left out.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, get_args

import torch
from torch import Tensor, nn

from ..base.deprecation import renamed
from ..base.display import Shows, plot_of, shows_as, table_of
from ..base.words import columns
from ..core.block import Block
from ..core.channels import tokens_to_grid
from ..core.hooks import HandleGroup
from ..core.select import Selector, modules_under
from ..errors import CaptureWarning, OptionError, SelectionError
from ..viz.fragments import Safe, image_tag, table, view
from ..viz.images import feature_grid, overlay
from .readers import linear_layers

if TYPE_CHECKING:
    from PIL.Image import Image

HeadFusion = Literal["mean", "max", "min"]
HEAD_FUSIONS: tuple[str, ...] = get_args(HeadFusion)


@dataclass(frozen=True, repr=False)
class Rollout(Shows):
    """The rollout of each image: ``maps`` ``(B, h, w)`` on the patch grid (each image's max 1), and
    ``joint`` ``(B, N, N)``, the layers' attention multiplied through (row 0: the class token).

    Attributes:
        maps: ``(B, h, w)``: the class token's rollout on the patch grid, each image's max 1.
        joint: ``(B, N, N)``: the layers' attention multiplied through.
        layers: the attention modules' calls, in call order.
        head_fusion: how heads were fused: ``mean``, ``max`` or ``min``.
        discard_ratio: the fraction of the lowest attention weights dropped per layer.
    """

    maps: Tensor
    joint: Tensor
    layers: list[str]  # the attention modules' calls, in call order
    head_fusion: str = "mean"
    discard_ratio: float = 0.0

    def table(self) -> str:
        """A line per image: the patch with the most rollout (row, column of the grid) and the maps' mean.

        Returns:
            The table, as text.
        """
        return table_of(self)

    def plot(self, image: Any = None, *, batch: int = 0, cmap: str | None = None, alpha: float = 0.5) -> Image:
        """A PIL image: every image's map as a tile, or ``maps[batch]`` over ``image`` (``hookscope.overlay``).

        Args:
            image: the picture ``maps[batch]`` is drawn over; None tiles every image's map.
            batch: the image drawn over ``image``.
            cmap: the matplotlib colormap; None is the default of the drawing used.
            alpha: the heat's weight over ``image``, in [0, 1].

        Returns:
            A PIL image.

        Raises:
            MissingDependencyError: Pillow or matplotlib is not installed.
        """
        return plot_of(self, image=image, batch=batch, cmap=cmap, alpha=alpha)

    def __repr__(self) -> str:
        batch, rows, cols = self.maps.shape
        return f"<Rollout of {len(self.layers)} attention calls: {batch} image(s), {rows}x{cols} patches>"


@renamed(layers="select")
def attention_rollout(
    model: nn.Module,
    x: Tensor,
    *,
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
    select: Selector | None = None,
    prefix: int = 1,
) -> Rollout:
    """The rollout of the class token's attention over the patches (a :class:`Rollout`; ``.maps`` is ``(B, h, w)``).

    ``select`` picks the attention modules: None (the default) is every ``nn.MultiheadAttention``
    the model has; a selector keeps the ``nn.MultiheadAttention`` modules it matches or that sit
    under a module it matches (``":blocks"``: the attention of every block). Their
    calls are multiplied in call order. ``prefix`` tokens lead the sequence (1: the class token,
    whose row is read); the rest must make a square patch grid. ``layers=`` is the old name of
    ``select=`` (deprecated).

    Args:
        model: a vision transformer built on ``nn.MultiheadAttention``.
        x: an image batch ``(B, C, H, W)``.
        head_fusion: how each layer's heads are fused: ``mean`` (the default), ``max`` or ``min``.
        discard_ratio: the fraction of each layer's lowest weights set to 0 before the product, in [0, 1).
        select: which attention modules (see above); None is every ``nn.MultiheadAttention``.
        prefix: the tokens before the patches (1: the class token).

    Returns:
        A ``Rollout`` with ``.maps`` ``(B, h, w)`` and ``.joint`` ``(B, N, N)``.

    Raises:
        OptionError: an unknown ``head_fusion`` or a ``discard_ratio`` outside [0, 1).
        SelectionError: ``select`` matches no module, or a linear-attention layer (or, with ``select=None``, a
            model holding one: see the module doc), or the model never called its attention.
        ShapeError: the tokens after ``prefix`` do not make a square grid.
    """
    _check_options(head_fusion, discard_ratio)
    _refuse_linear(model, select)
    with MultiheadWeights(model, nn.MultiheadAttention if select is None else select) as watch, torch.no_grad():
        model(x)
    if not watch.weights:
        raise SelectionError(f"{type(model).__name__} never called its attention modules; nothing to roll out")
    joint = rollout([w for _, w in watch.weights], head_fusion=head_fusion, discard_ratio=discard_ratio)
    cls = joint[:, 0, :]  # (B, N): how much each token fed the class token's final state
    heat = tokens_to_grid(cls[:, :, None], prefix=prefix)[:, 0]  # (B, h, w)
    peak = heat.flatten(1).amax(1).clamp_min(torch.finfo(heat.dtype).tiny)
    maps = heat / peak[:, None, None]
    return Rollout(maps, joint, [name for name, _ in watch.weights], head_fusion, discard_ratio)


def rollout(attentions: Sequence[Tensor], *, head_fusion: HeadFusion = "mean", discard_ratio: float = 0.0) -> Tensor:
    """``(B, N, N)`` joint attention from per-layer ``(B, heads, N, N)`` weights, first layer first."""
    _check_options(head_fusion, discard_ratio)
    if not attentions:
        raise OptionError("rollout needs the weights of at least one attention layer")
    first = attentions[0]
    eye = torch.eye(first.shape[-1], dtype=first.dtype, device=first.device)
    joint = eye.expand(len(first), -1, -1)  # (B, N, N)
    for weights in attentions:
        fused = fuse_heads(weights, head_fusion)  # (B, N, N)
        if discard_ratio > 0:
            fused = discard_smallest(fused, discard_ratio)
        step = fused + eye
        step = step / step.sum(dim=-1, keepdim=True)  # rows sum to 1 again
        joint = step @ joint
    return joint


def fuse_heads(weights: Tensor, how: HeadFusion) -> Tensor:
    """``(B, heads, N, N)`` -> ``(B, N, N)``: the heads' mean, max or min."""
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
        raise OptionError(f"expected (batch, heads, tokens, tokens) attention weights, got {tuple(weights.shape)}")
    if how == "mean":
        return weights.mean(dim=1)
    return weights.amax(dim=1) if how == "max" else weights.amin(dim=1)


def discard_smallest(fused: Tensor, ratio: float) -> Tensor:
    """``(B, N, N)`` with the ``int(N * ratio)`` smallest weights of each row set to 0, column 0 kept."""
    count = int(fused.shape[-1] * ratio)
    if count == 0:
        return fused
    ranked = fused.clone()
    ranked[..., 0] = torch.inf  # the class-token column is never discarded
    drop = ranked.topk(count, dim=-1, largest=False).indices  # (B, N, count)
    return fused.scatter(-1, drop, 0.0)


class MultiheadWeights(Block):
    """``(name, (B, heads, L, S) weights)`` of each call of the selected ``nn.MultiheadAttention``
    modules inside the ``with`` block, in call order (see the module doc for how)."""

    noun, remake = "attention weights block", "MultiheadWeights(model, select)"

    def __init__(self, model: nn.Module, select: Selector = nn.MultiheadAttention) -> None:
        super().__init__()
        found = [(n, m) for n, m in _select(model, select) if isinstance(m, nn.MultiheadAttention)]
        if not found:
            raise SelectionError(
                f"{type(model).__name__} has no nn.MultiheadAttention module among select={select!r}; "
                "rollout reads torch's attention modules (torchvision's VisionTransformer has them)"
            )
        self.modules = found
        self.weights: list[tuple[str, Tensor]] = []
        self._pending: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    def _install(self, handles: HandleGroup) -> None:
        for name, module in self.modules:
            handles.on_forward_pre(module, self._remember)
            handles.on_forward(module, partial(self._weigh, name))

    def _release(self) -> None:
        self._pending.clear()

    def _remember(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._pending[id(module)] = (args, kwargs)

    def _weigh(self, name: str, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        called = self._pending.pop(id(module), None)
        if called is None or output is None:  # forward raised: nothing to weigh
            return
        if module.training and getattr(module, "dropout", 0.0) > 0:
            warnings.warn(
                f"{name} is in training mode with attention dropout {module.dropout}: its weights are random; "
                "call model.eval() first",
                CaptureWarning,
                stacklevel=2,
            )
        call_args, call_kwargs = called
        kwargs = {**call_kwargs, "need_weights": True, "average_attn_weights": False}
        with torch.no_grad():
            _, weights = module.forward(*call_args, **kwargs)  # forward, not __call__: no hook runs again
        self.weights.append((name, weights.detach()))


def _select(model: nn.Module, select: Selector) -> list[tuple[str, nn.Module]]:
    """The modules ``select`` matches and every module under them (``":blocks"``: the blocks' attention)."""
    try:
        return modules_under(model, select)
    except SelectionError:
        if select is nn.MultiheadAttention:
            return []
        raise


def _refuse_linear(model: nn.Module, select: Selector | None) -> None:
    """Linear-attention layers: refused when selected or when ``select`` is None; named when left out."""
    linear = linear_layers(model)
    if not linear:
        return
    chosen = set() if select is None else {id(m) for _, m in _select(model, select)}
    selected = [f"{name} ({kind})" for name, module, kind in linear if id(module) in chosen]
    if selected:
        raise SelectionError(
            f"attention_rollout cannot roll out {', '.join(selected)}: linear-attention layers have no attention "
            "matrix; select the nn.MultiheadAttention modules only, or read them with hookscope.linear_attention"
        )
    names = ", ".join(f"{name} ({kind})" for name, _, kind in linear)
    if select is None:
        raise SelectionError(
            f"{type(model).__name__} also mixes tokens in linear-attention layers ({names}), which a rollout of its "
            "attention would leave out; pass select= its attention modules to roll out those alone (the rest is "
            "named in a warning), or read the linear layers with hookscope.linear_attention"
        )
    warnings.warn(
        f"the rollout leaves out the token mixing of the linear-attention layers {names}: it multiplies the "
        "selected attention layers alone, as if those layers passed each token through unmixed",
        CaptureWarning,
        stacklevel=3,
    )


def _check_options(head_fusion: str, discard_ratio: float) -> None:
    if head_fusion not in HEAD_FUSIONS:
        raise OptionError(f"head_fusion={head_fusion!r} is not one of {', '.join(HEAD_FUSIONS)}")
    if not isinstance(discard_ratio, (int, float)) or not 0.0 <= discard_ratio < 1.0:
        raise OptionError(f"discard_ratio must be in [0, 1), got {discard_ratio!r}")


def _rows(result: Rollout) -> list[list[str]]:
    """Per image: its index, the grid, the patch with the most rollout (row, column) and the map's mean."""
    rows = []
    for index, heat in enumerate(result.maps):
        peak = int(heat.flatten().argmax())
        where = f"({peak // heat.shape[1]}, {peak % heat.shape[1]})"
        rows.append([str(index), f"{heat.shape[0]}x{heat.shape[1]}", where, f"{float(heat.mean()):.3f}"])
    return rows


HEADER = ["image", "grid", "peak patch (row, col)", "mean"]


def rollout_table(result: Rollout) -> str:
    """``Rollout.table()``: a line per image, its peak patch and its map's mean (each map's max is 1)."""
    return "\n".join(columns([HEADER, *_rows(result)], right=(0, 3)))


def rollout_plot(
    result: Rollout, image: Any = None, *, batch: int = 0, cmap: str | None = None, alpha: float = 0.5
) -> Any:
    """``Rollout.plot()``: every image's map as a tile (one shared scale, ``cmap``), or ``maps[batch]``
    over ``image`` (``hookscope.overlay`` with ``cmap``, jet by default, and ``alpha``)."""
    if not 0 <= batch < len(result.maps):
        raise OptionError(f"batch={batch} is out of range: the rollout holds {len(result.maps)} images")
    if image is not None:
        return overlay(image, result.maps[batch], cmap=cmap or "jet", alpha=alpha)
    columns = min(8, len(result.maps))
    return feature_grid(result.maps, channels=None, normalize="shared", columns=columns, cmap=cmap)


@shows_as(Rollout, table=rollout_table, plot=rollout_plot)
def rollout_html(result: Rollout) -> Safe:
    """The maps as tiles and the table of peaks, one block."""
    picture = image_tag(rollout_plot(result), alt="attention rollout", width=None)
    body = Safe(picture + table(HEADER, _rows(result), numeric=(0, 3)))
    return view(body, title=f"Attention rollout of {len(result.layers)} attention calls")
