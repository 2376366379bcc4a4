"""Channels-last maps ``(B, H, W, C)`` (Swin's) drawn right: the same picture as the permuted
tensor drawn channels-first, in ``feature_grid`` and in the report, told apart by the module's
weights. Oracles: ``Tensor.permute`` and each module's definition."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
import torchvision
from torch import Tensor, nn

import hookscope
from hookscope.core.channels import channel_count, is_channels_last, spatial_maps
from hookscope.report.cards import picture_of
from hookscope.viz.images import feature_grid

pytest.importorskip("PIL")
pytest.importorskip("matplotlib")


def pixels(tensor: Tensor, **kwargs: object) -> bytes:
    return feature_grid(tensor, **kwargs).tobytes()  # type: ignore[arg-type]


def test_a_channels_last_grid_is_the_permuted_tensor_drawn_channels_first() -> None:
    torch.manual_seed(0)
    nhwc = torch.randn(2, 5, 7, 12)  # 12 channels of 5 x 7
    nchw = nhwc.permute(0, 3, 1, 2)
    assert pixels(nhwc, channels_last=True) == pixels(nchw)
    assert pixels(nhwc, channels_last=True, pick="top_var", channels=4) == pixels(nchw, pick="top_var", channels=4)
    assert pixels(nhwc[0], channels_last=True) == pixels(nchw[0])  # one image's (H, W, C)
    assert pixels(nhwc) != pixels(nchw)  # read channels-first it is 5 maps of 7 x 12: another picture
    assert torch.equal(spatial_maps(nhwc, channels_last=True), nchw)


def test_the_channel_count_comes_from_the_weights() -> None:
    assert channel_count(nn.Conv2d(3, 8, 3)) == 8 and channel_count(nn.Linear(4, 6)) == 6
    assert channel_count(nn.LayerNorm(16)) == 16 and channel_count(nn.BatchNorm2d(5)) == 5
    assert channel_count(nn.ReLU()) is None and channel_count(nn.Sequential(nn.ReLU()), inside=False) is None
    assert channel_count(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())) == 8
    merging = torchvision.models.swin_transformer.PatchMerging(16)  # norm of 64, then a projection to 32
    assert channel_count(merging) == merging.reduction.out_features == 32
    assert is_channels_last((2, 7, 7, 768), 768) and not is_channels_last((2, 768, 7, 7), 768)
    assert not is_channels_last((2, 7, 7, 768), None) and not is_channels_last((2, 8, 8, 8), 8)


class PoolChannelsLast(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=(1, 2))


def test_the_report_draws_a_channels_last_layer_as_its_permutation() -> None:
    torch.manual_seed(0)
    swin = torchvision.models.swin_transformer.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=[2, 2], num_classes=5
    )
    model = nn.Sequential(OrderedDict(features=swin.features, norm=swin.norm, pool=PoolChannelsLast(), head=swin.head))
    x = torch.randn(1, 3, 32, 32)
    with hookscope.capture(model, "norm") as cap:
        model.eval()(x)
    norm = cap["norm"].output  # (1, 4, 4, 32)
    report = hookscope.build_report(model, x, select="norm", cam_methods=())
    (view,) = next(v for v in report.layers if v.name == "norm").tensors
    assert view.shape == (1, 4, 4, 32)
    grid, _, note = picture_of(norm.permute(0, 3, 1, 2), diverging=False)
    assert view.grid == grid and note == view.note
    assert "of 32" in view.note and grid != picture_of(norm, diverging=False)[0]


class Projected(nn.Module):
    """A channels-last layer: a linear map over the last axis of (B, H, W, C), as Swin's blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 12)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x.permute(0, 2, 3, 1))  # (B, H, W, 12)


def test_notebook_views_and_plots_of_a_capture_and_its_store_draw_the_permutation(tmp_path) -> None:
    """The capture knows each module's channel count (Record.channels), the store keeps it, and every
    picture of the record (its plot, its notebook thumbnail) is the permuted tensor drawn channels-first."""
    from hookscope.report.inline import grid_png

    torch.manual_seed(0)
    model = nn.Sequential(Projected())
    with hookscope.capture(model, "0") as cap:
        model(torch.randn(1, 3, 6, 10))
    record = cap["0"]
    nhwc = record.output
    assert record.channels == 12 and nhwc.shape == (1, 6, 10, 12)
    assert record.plot().tobytes() == pixels(nhwc[0].permute(2, 0, 1), channels=16)
    want = grid_png(nhwc.permute(0, 3, 1, 2), diverging=False, channels=16, side=48)  # inline.GRID_*
    assert record._repr_png_() == want and want is not None
    assert grid_png(nhwc, diverging=False, channels=16, side=48) != want  # read channels-first: another picture
    run = hookscope.save(cap, tmp_path / "cap.hookscope")
    assert run["0"].channels == 12
    assert run["0"].plot().tobytes() == record.plot().tobytes()
