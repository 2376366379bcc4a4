"""Pictures checked by numbers: geometry by hand, pixels against matplotlib's colormaps."""

from __future__ import annotations

import subprocess
import sys

import matplotlib
import numpy as np
import pytest
import skimage.data
import torch
from numpy.typing import NDArray
from PIL import Image

import hookscope
from hookscope.core.channels import tokens_to_grid
from hookscope.errors import OptionError, ShapeError
from hookscope.viz.images import PANEL_GAP, feature_grid, overlay, panel, pick_channels, to_pil
from tests.models import LeNet

RAMP = torch.tensor([[0.0, 1.0], [2.0, 3.0]])  # min-max scaled: 0, 1/3, 2/3, 1 (clear of colormap bin edges)


def pixels(image: Image.Image) -> NDArray[np.int64]:
    return np.asarray(image).astype(np.int64)


def color(name: str, value: float) -> NDArray[np.float64]:
    """The oracle: matplotlib's RGBA for ``value``, times 255, RGB only (an int would be a LUT index)."""
    return np.asarray(matplotlib.colormaps[name](float(value))[:3]) * 255


def assert_color(pixel: NDArray[np.int64], name: str, value: float) -> None:
    np.testing.assert_allclose(pixel, color(name, value), atol=1)


# -- feature_grid: geometry -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "kwargs", "size"),
    [
        ((10, 4, 4), {}, (4 * 48 + 3 * 2, 3 * 48 + 2 * 2)),  # ceil(sqrt(10)) = 4 columns, 3 rows, 4x4 -> 48
        ((10, 4, 4), {"columns": 5}, (5 * 48 + 4 * 2, 2 * 48 + 1 * 2)),
        ((10, 4, 4), {"channels": 4, "padding": 0}, (2 * 48, 2 * 48)),
        ((3, 6, 9), {"min_tile": 20}, (2 * 36 + 2, 2 * 24 + 2)),  # factor ceil(20 / 6) = 4: 24 x 36 tiles
        ((2, 3, 4, 4), {}, (2 * 48 + 2, 2 * (2 * 48 + 2) + 4 * 2)),  # two blocks of 2 x 2, 4 paddings apart
        ((3, 64, 64), {"columns": 8}, (3 * 64 + 2 * 2, 64)),  # columns capped at the tile count
    ],
)
def test_grid_geometry(shape: tuple[int, ...], kwargs: dict[str, object], size: tuple[int, int]) -> None:
    image = feature_grid(torch.randn(shape), **kwargs)  # type: ignore[arg-type]
    assert image.mode == "RGB"
    assert image.size == size


def test_tiles_sit_where_computed_and_the_rest_is_background() -> None:
    maps = RAMP.repeat(10, 1, 1) + torch.arange(10.0)[:, None, None]  # 10 non-constant tiles, 4 x 3 slots
    got = pixels(feature_grid(maps, min_tile=24, background=(1, 2, 3)))  # 2x2 -> 24x24 tiles
    step = 24 + 2
    for slot in range(12):
        row, col = divmod(slot, 4)
        tile = got[row * step : row * step + 24, col * step : col * step + 24]
        assert (tile == (1, 2, 3)).all() == (slot >= 10), slot  # slots 10 and 11 are empty
    assert (got[:, 24:26] == (1, 2, 3)).all()  # the padding column between columns 0 and 1
    assert (got[24:26, :] == (1, 2, 3)).all()


def test_nearest_upscale_of_a_4x4_map_repeats_pixels_exactly() -> None:
    torch.manual_seed(0)
    maps = torch.randn(1, 4, 4)
    small = pixels(feature_grid(maps, min_tile=0))
    big = pixels(feature_grid(maps, min_tile=48))
    assert small.shape == (4, 4, 3) and big.shape == (48, 48, 3)
    np.testing.assert_array_equal(big, small.repeat(12, axis=0).repeat(12, axis=1))
    assert feature_grid(torch.randn(1, 5, 5), min_tile=48).size == (50, 50)  # whole factor ceil(48 / 5)


# -- feature_grid: colours --------------------------------------------------------------------
def test_known_tile_pixels_are_the_colormap_of_the_hand_normalised_values() -> None:
    got = pixels(feature_grid((RAMP * 5 - 7)[None], min_tile=0))  # per-tile min-max: 0, 1/3, 2/3, 1
    for (y, x), v in zip([(0, 0), (0, 1), (1, 0), (1, 1)], [0, 1 / 3, 2 / 3, 1], strict=True):
        assert_color(got[y, x], "viridis", v)


def test_gray_colormap_is_the_normalised_value() -> None:
    got = pixels(feature_grid(RAMP[None], cmap="gray", min_tile=0))
    np.testing.assert_allclose(got[..., 0], np.array([[0, 1], [2, 3]]) / 3 * 255, atol=1)
    assert (got[..., 0] == got[..., 1]).all() and (got[..., 1] == got[..., 2]).all()


def test_shared_and_per_tile_normalisation_differ_as_computed() -> None:
    maps = torch.stack([RAMP, RAMP + 10])  # values 0..3 and 10..13
    tile = pixels(feature_grid(maps, min_tile=0, padding=1))  # 2 columns: x = 0..1 and 3..4
    shared = pixels(feature_grid(maps, normalize="shared", min_tile=0, padding=1))
    np.testing.assert_array_equal(tile[:, 0:2], tile[:, 3:5])  # per tile, both tiles look the same
    for (y, x), value in zip([(0, 0), (0, 1), (1, 0), (1, 1)], [0, 1, 2, 3], strict=True):
        assert_color(shared[y, x], "viridis", value / 13)
        assert_color(shared[y, x + 3], "viridis", (value + 10) / 13)


def test_diverging_maps_zero_to_the_midpoint_and_uses_a_symmetric_range() -> None:
    grads = torch.tensor([[[-1.0, 0.0], [0.5, 4.0]]])  # max |x| = 4: v = 0.5 + x / 8
    got = pixels(feature_grid(grads, diverging=True, min_tile=0))
    for (y, x), v in zip([(0, 0), (0, 1), (1, 0), (1, 1)], [0.375, 0.5, 0.5625, 1.0], strict=True):
        assert_color(got[y, x], "RdBu_r", v)
    shared = pixels(feature_grid(torch.stack([grads[0], grads[0] / 4]), diverging=True, normalize="shared", min_tile=0))
    assert_color(shared[1, 4 + 1], "RdBu_r", 0.5 + 1.0 / 8)  # second tile's 1.0 on the shared scale of 4
    assert_color(shared[0, 4 + 1], "RdBu_r", 0.5)


def test_constant_tiles_are_the_mid_colour_never_nan() -> None:
    got = pixels(feature_grid(torch.full((1, 3, 3), 7.0), min_tile=0))
    assert (got == got[0, 0]).all()
    assert_color(got[0, 0], "viridis", 0.5)
    zero_grad = pixels(feature_grid(torch.zeros(1, 3, 3), diverging=True, min_tile=0))
    assert_color(zero_grad[1, 1], "RdBu_r", 0.5)


def test_non_finite_values_are_background_and_left_out_of_the_range() -> None:
    maps = torch.tensor([[[float("nan"), 0.0], [float("inf"), 2.0], [float("-inf"), 1.0]]])
    got = pixels(feature_grid(maps, min_tile=0, background=(1, 2, 3)))
    for y in range(3):
        assert tuple(got[y, 0]) == (1, 2, 3)
    assert_color(got[0, 1], "viridis", 0.0)
    assert_color(got[1, 1], "viridis", 1.0)
    assert_color(got[2, 1], "viridis", 0.5)
    all_nan = pixels(feature_grid(torch.full((1, 2, 2), float("nan")), min_tile=0, background=(9, 9, 9)))
    assert (all_nan == 9).all()


# -- feature_grid: which channels -------------------------------------------------------------
def _channels_with_known_scores() -> torch.Tensor:
    """(2, 6, 4, 4): a zero-mean ramp per channel; means set by offsets, variances by scales."""
    torch.manual_seed(0)
    ramp = torch.linspace(-1, 1, 16).reshape(4, 4)
    offsets = torch.tensor([3.0, 9.0, 1.0, 7.0, 5.0, 0.0])  # top_mean order: 1, 3, 4, 0, 2, 5
    scales = torch.tensor([1.0, 0.5, 4.0, 2.0, 3.0, 0.1])  # top_var order: 2, 4, 3, 0, 1, 5
    one = offsets[:, None, None] + scales[:, None, None] * ramp
    return torch.stack([one, one.flip(-1)])


@pytest.mark.parametrize(("pick", "expected"), [("first", [0, 1, 2]), ("top_mean", [1, 3, 4]), ("top_var", [2, 4, 3])])
def test_top_k_picks_the_right_channels_in_descending_order(pick: str, expected: list[int]) -> None:
    maps = _channels_with_known_scores()
    assert pick_channels(maps, 3, pick).tolist() == expected  # type: ignore[arg-type]
    got = feature_grid(maps, channels=3, pick=pick, normalize="shared")  # type: ignore[arg-type]
    oracle = feature_grid(maps[:, expected], channels=None, normalize="shared")
    np.testing.assert_array_equal(pixels(got), pixels(oracle))


def test_channel_cap() -> None:
    maps = _channels_with_known_scores()
    assert pick_channels(maps, 100).tolist() == [0, 1, 2, 3, 4, 5]
    assert pick_channels(maps, None, "top_mean").tolist() == [1, 3, 4, 0, 2, 5]
    assert feature_grid(torch.randn(100, 4, 4)).size == (8 * 48 + 7 * 2,) * 2  # 64 channels by default


# -- feature_grid: inputs and errors ----------------------------------------------------------
def test_vit_tokens_draw_as_their_patch_grid() -> None:
    tokens = torch.randn(1, 197, 4)
    got = feature_grid(tokens, tokens=True)
    assert got.size == (2 * 56 + 2, 2 * 56 + 2)  # 4 channels of 14 x 14, enlarged 4x
    np.testing.assert_array_equal(pixels(got), pixels(feature_grid(tokens_to_grid(tokens))))
    assert feature_grid(tokens).size == (4 * 12, 197 * 12)  # without tokens=True: one 197 x 4 map


def test_a_real_conv_layer() -> None:
    torch.manual_seed(0)
    model = LeNet()
    with hookscope.capture(model, "conv1") as cap:
        model(torch.randn(1, 3, 32, 32))
    image = feature_grid(cap["conv1"].output)  # 6 maps of 28 x 28, enlarged 2x
    assert image.size == (3 * 56 + 2 * 2, 2 * 56 + 2)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"cmap": "nope"}, OptionError, r"unknown colormap 'nope'; try 'viridis', .* matplotlib\.colormaps"),
        ({"pick": "max"}, OptionError, r"pick='max' is not one of 'first', 'top_mean', 'top_var'"),
        ({"normalize": "global"}, OptionError, r"normalize='global' is not one of 'tile', 'shared'"),
        ({"channels": 0}, OptionError, r"channels must be at least 1"),
        ({"columns": 0}, OptionError, r"columns must be at least 1"),
        ({"padding": -1}, OptionError, r"padding must be 0 or more"),
        ({"background": (0, 0, 300)}, OptionError, r"background must be an \(r, g, b\) tuple"),
    ],
)
def test_bad_options(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        feature_grid(torch.randn(2, 4, 4), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "match"),
    [(torch.randn(4, 4), r"expected \(B, C, H, W\)"), (torch.zeros(1, 0, 4, 4), r"nothing to draw")],
)
def test_bad_shapes(value: torch.Tensor, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        feature_grid(value)


# -- overlay and panel ------------------------------------------------------------------------
PICTURE = np.random.default_rng(0).integers(0, 256, size=(8, 4, 3), dtype=np.uint8)  # H=8, W=4
HEAT = torch.tensor([[0.1], [0.9]])  # (2, 1): resized to (8, 4)
# Bilinear, half-pixel centres (align_corners=False) by hand: row y samples (y + 0.5) / 4 - 0.5,
# clamped to [0, 1]: weights 0, 0, 1/8, 3/8, 5/8, 7/8, 1, 1 on the second row.
HEAT_ROWS = [0.1, 0.1, 0.2, 0.4, 0.6, 0.8, 0.9, 0.9]


@pytest.mark.parametrize(
    "image",
    [Image.fromarray(PICTURE), PICTURE, torch.from_numpy(PICTURE).permute(2, 0, 1).float() / 255],
    ids=["pil", "uint8-hwc", "float-chw"],
)
def test_overlay_alpha_zero_is_the_image(image: object) -> None:
    np.testing.assert_array_equal(pixels(overlay(image, HEAT, alpha=0.0)), PICTURE)


def test_overlay_alpha_one_is_the_colormapped_heat_resized_to_the_image() -> None:
    got = pixels(overlay(PICTURE, HEAT, alpha=1.0))
    assert got.shape == (8, 4, 3)
    for y, v in enumerate(HEAT_ROWS):
        for x in range(4):
            assert_color(got[y, x], "jet", v)


def test_overlay_blends_and_clips() -> None:
    heat = pixels(overlay(PICTURE, HEAT, alpha=1.0))
    blended = pixels(overlay(PICTURE, HEAT.numpy(), alpha=0.25))
    np.testing.assert_array_equal(blended, np.rint(0.75 * PICTURE + 0.25 * heat))
    outside = torch.tensor([[-5.0, 0.0], [1.0, 7.0]])
    np.testing.assert_array_equal(
        pixels(overlay(PICTURE, outside, cmap="magma")), pixels(overlay(PICTURE, outside.clamp(0, 1), cmap="magma"))
    )
    assert overlay(PICTURE, HEAT[None, None]).size == (4, 8)  # a (1, 1, h, w) CAM is one map


@pytest.mark.parametrize(
    ("heat", "alpha", "error", "match"),
    [
        (torch.zeros(2, 3, 4), 0.5, ShapeError, r"heat must be one \(h, w\) map, got shape \(2, 3, 4\)"),
        (HEAT, 1.5, OptionError, r"alpha must be in \[0, 1\], got 1\.5"),
    ],
)
def test_overlay_errors(heat: torch.Tensor, alpha: float, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        overlay(PICTURE, heat, alpha=alpha)


def test_panel_is_image_heatmap_overlay_side_by_side() -> None:
    cat = skimage.data.chelsea()[::4, ::4]  # (75, 113, 3)
    heat = torch.rand(7, 7, generator=torch.Generator().manual_seed(0))
    bare = pixels(panel(cat, heat, labels=None))
    height, width = cat.shape[:2]
    assert bare.shape == (height, 3 * width + 2 * PANEL_GAP, 3)
    step = width + PANEL_GAP
    np.testing.assert_array_equal(bare[:, :width], cat)
    np.testing.assert_array_equal(bare[:, step : step + width], pixels(overlay(cat, heat, alpha=1.0)))
    np.testing.assert_array_equal(bare[:, 2 * step :], pixels(overlay(cat, heat, alpha=0.5)))
    assert (bare[:, width:step] == 255).all()  # the gap is white
    captioned = pixels(panel(cat, heat))
    top = captioned.shape[0] - height
    assert top > 8 and captioned.shape[1] == bare.shape[1]
    np.testing.assert_array_equal(captioned[top:], bare)
    for i in range(3):  # each caption drew some dark text above its picture
        assert (captioned[:top, i * step : i * step + width] < 128).any()


# -- to_pil and the import -------------------------------------------------------------------
def test_to_pil_layouts() -> None:
    chw = torch.from_numpy(PICTURE).permute(2, 0, 1).float() / 255
    np.testing.assert_array_equal(pixels(to_pil(chw)), PICTURE)
    np.testing.assert_array_equal(pixels(to_pil(PICTURE)), PICTURE)
    gray = to_pil(torch.tensor([[0.0, 0.5], [1.0, float("nan")]]))
    assert gray.mode == "L"
    assert pixels(gray).tolist() == [[0, 128], [255, 0]]
    with pytest.raises(ShapeError, match=r"expected a \(3, H, W\), \(H, W, 3\) or \(H, W\) picture"):
        to_pil(np.zeros((4, 5, 6)))
    with pytest.raises(OptionError, match=r"uint8 in \[0, 255\], got dtype int64"):
        to_pil(np.zeros((4, 5), dtype=np.int64))


def test_import_does_not_load_pil_or_matplotlib() -> None:
    code = (
        "import sys, hookscope.viz.images, hookscope.core.channels; "
        "print(sorted(m for m in ('PIL', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
