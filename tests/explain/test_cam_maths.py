"""CAM maths, each against its paper's formula written out element by element."""

from __future__ import annotations

import itertools

import pytest
import torch

from hookscope.explain import cam as cams

B, C, H, W = 2, 3, 4, 5


@pytest.fixture
def a_and_g() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    activations = torch.rand(B, C, H, W, generator=gen, dtype=torch.float64) * 2
    gradients = torch.randn(B, C, H, W, generator=gen, dtype=torch.float64)
    return activations, gradients


def _combine(a: torch.Tensor, weight: list[list[float]]) -> torch.Tensor:
    """ReLU(sum_k w[b][k] * A[b, k]), by loops."""
    out = torch.zeros(B, H, W, dtype=torch.float64)
    for b, k, i, j in itertools.product(range(B), range(C), range(H), range(W)):
        out[b, i, j] += weight[b][k] * a[b, k, i, j]
    return out.relu()


def test_grad_cam_is_the_spatially_averaged_gradient_weighting(a_and_g) -> None:
    """w_k = (1/hw) sum_ij g_ij."""
    a, g = a_and_g
    w = [[sum(g[b, k, i, j].item() for i in range(H) for j in range(W)) / (H * W) for k in range(C)] for b in range(B)]
    torch.testing.assert_close(cams.grad_cam(a, g), _combine(a, w))


def test_grad_cam_pp_follows_the_alpha_formula(a_and_g) -> None:
    """alpha_ij = g^2 / (2 g^2 + sum_ab A_ab g^3); w_k = sum_ij alpha_ij relu(g_ij)."""
    a, g = a_and_g
    w = [[0.0] * C for _ in range(B)]
    for b, k in itertools.product(range(B), range(C)):
        total = a[b, k].sum().item()
        for i, j in itertools.product(range(H), range(W)):
            gij = g[b, k, i, j].item()
            alpha = gij**2 / (2 * gij**2 + total * gij**3 + 1e-7) if gij != 0 else 0.0
            w[b][k] += alpha * max(gij, 0.0)
    torch.testing.assert_close(cams.grad_cam_pp(a, g), _combine(a, w))


def test_xgrad_cam_weights_gradients_by_normalised_activations(a_and_g) -> None:
    """w_k = sum_ij A_ij / (sum_ab A_ab) * g_ij."""
    a, g = a_and_g
    w = [
        [sum((a[b, k, i, j] * g[b, k, i, j]).item() for i in range(H) for j in range(W)) / (a[b, k].sum().item() + 1e-7)
         for k in range(C)]
        for b in range(B)
    ]  # fmt: skip
    torch.testing.assert_close(cams.xgrad_cam(a, g), _combine(a, w))


def test_layer_cam_weights_each_position(a_and_g) -> None:
    """ReLU(sum_k relu(g_kij) A_kij)."""
    a, g = a_and_g
    out = torch.zeros(B, H, W, dtype=torch.float64)
    for b, k, i, j in itertools.product(range(B), range(C), range(H), range(W)):
        out[b, i, j] += max(g[b, k, i, j].item(), 0.0) * a[b, k, i, j].item()
    torch.testing.assert_close(cams.layer_cam(a, g), out.relu())


def test_eigen_cam_recovers_a_rank_one_map_with_a_positive_sign() -> None:
    """A_k = c_k * M: the first principal component is M (centred), oriented to agree with M."""
    gen = torch.Generator().manual_seed(1)
    m = torch.rand(H, W, generator=gen, dtype=torch.float64)
    coefficients = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    a = (coefficients[:, None, None] * m)[None].repeat(2, 1, 1, 1)
    a[1] = -a[1] + 3.0  # flip the map's sign: the component must follow the mean activation
    maps = cams.eigen_cam(a)
    for b, expected in ((0, m - m.mean()), (1, -(m - m.mean()))):
        scale = maps[b].max() / expected.relu().max()
        torch.testing.assert_close(maps[b], expected.relu() * scale)


def test_score_cam_masks_and_softmax_weights(a_and_g) -> None:
    """Masks are min-max scaled upsampled channels; weights are softmax over channel scores."""
    a, _ = a_and_g
    masks = cams.score_cam_masks(a, size=(H, W))
    for b, k in itertools.product(range(B), range(C)):
        ch = a[b, k]
        torch.testing.assert_close(masks[b, k], (ch - ch.min()) / (ch.max() - ch.min()))
    channel_scores = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    exp = channel_scores.exp()
    w = (exp / exp.sum(1, keepdim=True)).tolist()
    torch.testing.assert_close(cams.score_cam(a, channel_scores), _combine(a, w))


def test_normalize_maps_scales_each_image_and_keeps_flat_maps_at_zero() -> None:
    """Per image: min -> 0, max -> 1; a constant map is all zeros; resizing hits the size asked."""
    maps = torch.stack([torch.arange(20.0).reshape(4, 5), torch.full((4, 5), 7.0)])
    out = cams.normalize_maps(maps)
    torch.testing.assert_close(out[0], maps[0] / 19.0)
    assert torch.equal(out[1], torch.zeros(4, 5))
    resized = cams.normalize_maps(maps, size=(8, 10))
    assert resized.shape == (2, 8, 10)
    assert resized[0].min() == 0.0
    assert resized[0].max() == 1.0
