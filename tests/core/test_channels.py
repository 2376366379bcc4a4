"""Token activations to patch grids: layouts checked token by token against a hand-built arrangement."""

from __future__ import annotations

import pytest
import torch

from hookscope.core.channels import spatial_maps, tokens_to_grid
from hookscope.errors import HookscopeError, ShapeError


def _tokens(batch: int, prefix: int, h: int, w: int, channels: int) -> torch.Tensor:
    """(B, prefix + h*w, C) tokens whose value names its place: 1000*b + 100*c + token index."""
    count = prefix + h * w
    b = torch.arange(batch)[:, None, None]
    n = torch.arange(count)[None, :, None]
    c = torch.arange(channels)[None, None, :]
    return (1000 * b + 100 * c + n).float()


def _expected_grid(tokens: torch.Tensor, prefix: int, h: int, w: int) -> torch.Tensor:
    """The patch grid by hand: patch i sits at row i // w, column i % w."""
    batch, _, channels = tokens.shape
    grid = torch.empty(batch, channels, h, w)
    for i in range(h * w):
        grid[:, :, i // w, i % w] = tokens[:, prefix + i, :]
    return grid


@pytest.mark.parametrize(
    ("prefix", "h", "w"),
    [(0, 4, 4), (1, 14, 14), (2, 14, 14), (5, 14, 14), (1, 7, 7)],
    ids=["no-prefix", "vit-cls", "deit-distilled", "cls+4-registers", "vit-b32"],
)
def test_inferred_prefix_round_trips_a_known_arrangement(prefix: int, h: int, w: int) -> None:
    tokens = _tokens(2, prefix, h, w, channels=3)
    grid = tokens_to_grid(tokens)
    assert grid.shape == (2, 3, h, w)
    torch.testing.assert_close(grid, _expected_grid(tokens, prefix, h, w), rtol=0, atol=0)
    assert grid[1, 2, 2, 3].item() == 1000 + 200 + prefix + 2 * w + 3  # token prefix + 2w + 3 at row 2, col 3


def test_explicit_prefix_and_non_square_grid() -> None:
    tokens = _tokens(1, 1, 3, 5, channels=2)  # 16 tokens: 1 + 3 x 5
    grid = tokens_to_grid(tokens, grid=(3, 5))  # prefix = 16 - 15
    torch.testing.assert_close(grid, _expected_grid(tokens, 1, 3, 5), rtol=0, atol=0)
    torch.testing.assert_close(tokens_to_grid(tokens, grid=(3, 5), prefix=1), grid, rtol=0, atol=0)
    registers = _tokens(1, 5, 2, 2, channels=2)  # 9 tokens: 1 class + 4 registers + 2 x 2
    torch.testing.assert_close(tokens_to_grid(registers, prefix=5), _expected_grid(registers, 5, 2, 2))


def test_small_grids_are_ambiguous_and_the_smallest_prefix_wins() -> None:
    """9 tokens read as 3 x 3 with no prefix (documented): small grids with registers need prefix=."""
    assert tokens_to_grid(torch.zeros(1, 9, 2)).shape == (1, 2, 3, 3)
    assert tokens_to_grid(torch.zeros(1, 9, 2), prefix=5).shape == (1, 2, 2, 2)


def test_unbatched_tokens_get_a_batch_of_one() -> None:
    tokens = _tokens(1, 1, 4, 4, channels=3)
    torch.testing.assert_close(tokens_to_grid(tokens[0]), _expected_grid(tokens, 1, 4, 4), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("kwargs", "count", "match"),
    [
        ({}, 59, r"59 tokens are not a square patch grid after dropping 0\.\.8 leading tokens; pass grid="),
        ({"prefix": 2}, 197, r"197 tokens minus prefix=2 leave no square patch grid"),
        ({"prefix": 197}, 197, r"minus prefix=197"),
        ({"grid": (14, 15)}, 197, r"197 tokens do not fit grid=\(14, 15\): N must be prefix \+ h \* w"),
        ({"grid": (14, 14), "prefix": 2}, 197, r"do not fit grid=\(14, 14\) and prefix=2"),
    ],
)
def test_impossible_token_counts_are_one_line_errors(kwargs: dict[str, object], count: int, match: str) -> None:
    with pytest.raises(ShapeError, match=match) as info:
        tokens_to_grid(torch.zeros(1, count, 4), **kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)
    assert isinstance(info.value, HookscopeError)


@pytest.mark.parametrize("shape", [(4,), (1, 2, 3, 4)])
def test_tokens_need_two_or_three_dims(shape: tuple[int, ...]) -> None:
    with pytest.raises(ShapeError, match=r"expected \(batch, tokens, channels\) or \(tokens, channels\), got a"):
        tokens_to_grid(torch.zeros(shape))


def test_spatial_maps_passes_conv_maps_through() -> None:
    maps = torch.randn(2, 3, 5, 7)
    assert spatial_maps(maps) is maps
    single = torch.randn(3, 5, 5)
    torch.testing.assert_close(spatial_maps(single), single[None], rtol=0, atol=0)
    odd = torch.randn(3, 75, 113)  # 75 - p is no square for p in 0..8: only (C, H, W) fits
    assert spatial_maps(odd).shape == (1, 3, 75, 113)
    small = torch.randn(3, 6, 9)  # 6 = 2 + 2 x 2 tokens, but grids under 4 x 4 are not guessed
    assert spatial_maps(small).shape == (1, 3, 6, 9)


def test_spatial_maps_reads_tokens_when_told() -> None:
    tokens = _tokens(2, 1, 14, 14, channels=3)
    torch.testing.assert_close(spatial_maps(tokens, tokens=True), _expected_grid(tokens, 1, 14, 14))
    torch.testing.assert_close(spatial_maps(tokens[0], tokens=True), _expected_grid(tokens[:1], 1, 14, 14))
    maps = torch.randn(2, 3, 5, 7)
    assert spatial_maps(maps, tokens=True) is maps  # tokens=True is safe on captured conv maps too


def test_spatial_maps_reads_3d_as_maps_unless_told_tokens() -> None:
    """(64, 150, 226) is a resnet conv1 map of chelsea, and also 6 + 12 x 12 tokens: no guessing."""
    maps = torch.randn(64, 150, 226)
    assert spatial_maps(maps).shape == (1, 64, 150, 226)
    assert spatial_maps(maps, tokens=True).shape == (64, 226, 12, 12)


@pytest.mark.parametrize("value", [torch.zeros(4, 4), torch.zeros(1, 1, 1, 4, 4), torch.zeros(16), [[1.0]]])
def test_spatial_maps_bad_shapes(value: object) -> None:
    with pytest.raises(ShapeError, match=r"expected (\(B, C, H, W\)|a torch\.Tensor)"):
        spatial_maps(value)  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match=r"expected"):
        spatial_maps(value, tokens=False)  # type: ignore[arg-type]
