"""cam's default layer on class-token models is one whose map the score depends on, and cam returns
one map per image. Oracles: a forward hook and ``torch.autograd.grad`` at the chosen layer (Grad-CAM
written out by hand), and the zero gradient at the final norm's patch tokens, which the old rule read.
Tiny random timm models (pretrained=False), their classifiers drawn at random (timm starts some at 0)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.errors import ShapeError
from hookscope.explain.layers import choose_layer
from hookscope.explain.normalize import normalize_maps

timm = pytest.importorskip("timm")


def convit() -> nn.Module:
    return timm.models.convit.ConVit(img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2,
                                     local_up_to_layer=1, num_classes=5)  # fmt: skip


def cait() -> nn.Module:
    return timm.models.cait.Cait(img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2,
                                 depth_token_only=1, num_classes=5)  # fmt: skip


def coat() -> nn.Module:
    return timm.models.coat.CoaT(img_size=64, patch_size=4, embed_dims=(16, 16, 32, 32), serial_depths=(1, 1, 1, 1),
                                 num_heads=8, mlp_ratios=(2, 2, 2, 2), num_classes=5)  # fmt: skip


def pit() -> nn.Module:
    pits = timm.models.pit
    return pits.PoolingVisionTransformer(img_size=64, patch_size=8, stride=4, base_dims=[8, 8, 8], depth=[1, 1, 1],
                                         heads=[1, 2, 2], mlp_ratio=2, num_classes=5)  # fmt: skip


def sequencer() -> nn.Module:
    return timm.models.sequencer.Sequencer2d(img_size=32, layers=(1, 1, 1, 1), patch_sizes=(4, 2, 1, 1),
                                             embed_dims=(8, 16, 16, 16), hidden_sizes=(4, 8, 8, 8),
                                             mlp_ratios=(2, 2, 2, 2), num_classes=5)  # fmt: skip


def built(make: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    model = make().eval()
    head = model.get_classifier()
    nn.init.normal_(getattr(head, "fc", head).weight)  # timm starts Sequencer's at 0: no score depends on anything
    return model


def output_of(model: nn.Module, layer: str, x: Tensor) -> tuple[Tensor, Tensor]:
    """The layer's first output and the class-1 scores, by a plain forward hook."""
    seen: list[Tensor] = []
    hook = model.get_submodule(layer).register_forward_hook(
        lambda m, i, o: seen.append(o if isinstance(o, Tensor) else o[0])
    )
    try:
        score = model(x)[:, 1]
    finally:
        hook.remove()
    return seen[-1], score


def as_grid(tensor: Tensor, side: int) -> Tensor:
    """(B, N, C) tokens -> (B, C, side, side), the class tokens (the first N - side**2) left out;
    (B, side, side, C) channels last -> (B, C, side, side)."""
    if tensor.dim() == 4:
        return tensor.permute(0, 3, 1, 2)
    return tensor[:, -side * side :].reshape(len(tensor), side, side, -1).permute(0, 3, 1, 2)


CASES = [  # (model, input side, the pick, its grid side, the layer the old rule read)
    (convit, 32, "blocks.1.norm1", 4, "norm"),
    (cait, 32, "blocks_token_only.0.norm1", 4, "norm"),
    (coat, 64, "serial_blocks4.0.norm1", 2, "norm4"),
    (pit, 64, "transformers.2.blocks.0.norm1", 4, "transformers"),
    (sequencer, 32, "norm", 2, None),
]


@pytest.mark.parametrize(("make", "size", "layer", "side", "old"), CASES, ids=lambda v: getattr(v, "__name__", ""))
def test_the_default_layer_is_one_the_score_depends_on(
    make: Callable[[], nn.Module], size: int, layer: str, side: int, old: str | None
) -> None:
    model, x = built(make), torch.randn(2, 3, size, size)
    assert choose_layer(model, x).layer == layer
    if old is not None:  # the old pick: the score depends on x, but not on its map (the head reads the class token)
        leaf = x.clone().requires_grad_(True)
        held, score = output_of(model, old, leaf)
        g, dx = torch.autograd.grad(score.sum(), [held, leaf], allow_unused=True)
        assert dx is not None and dx.abs().sum() > 0
        assert g is None or (g if g.dim() == 4 else g[:, 1:]).eq(0).all()  # tokens: all but the class token
    a, score = output_of(model, layer, x)
    (g,) = torch.autograd.grad(score.sum(), a)
    a, g = as_grid(a.detach(), side), as_grid(g, side)
    by_hand = (g.mean(dim=(2, 3), keepdim=True) * a).sum(1).relu()  # Grad-CAM at the chosen layer
    assert (by_hand.flatten(1).amax(1) > by_hand.flatten(1).amin(1)).all()  # not flat: a map, not zeros
    heat = hookscope.cam(model, x, target=1)
    torch.testing.assert_close(heat, normalize_maps(by_hand, size=(size, size)), atol=1e-5, rtol=1e-4)


def test_a_layer_that_folds_rows_into_the_batch_is_refused() -> None:
    """Sequencer2D's LSTM over rows reads (B * H, W, C): 4 rows for each of 2 images."""
    model, x = built(sequencer), torch.randn(2, 3, 32, 32)
    layer = "stages.0.blocks.0.rnn_tokens.rnn_v"
    held, _ = output_of(model, layer, x)
    assert held.shape[0] == 2 * 8  # (B * W, H, C): the columns of an 8 x 8 grid, each a sequence
    with pytest.raises(ShapeError, match=r"layer 'stages.0.blocks.0.rnn_tokens.rnn_v', whose output \(16, 8, 8\) "
                                         r"has 16 rows for a batch of 2"):  # fmt: skip
        hookscope.cam(model, x, target=1, select=layer)
    assert hookscope.cam(model, x, target=1).shape == (2, 32, 32)  # the default skips it
