"""The CAM methods' maths: pure functions on a layer's activations and gradients, each (B, C, h, w)
(``hookscope.core.channels.spatial_maps`` turns token activations into maps), returning raw maps
(B, h, w) at the layer's resolution, ReLU applied. ``hookscope.explain.normalize.normalize_maps``
scales them to [0, 1] at the input's size; ``hookscope.explain.cam`` names them (``GRAD_METHODS``)
and runs the passes that feed them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

_EPS = 1e-7


def grad_cam(activations: Tensor, gradients: Tensor) -> Tensor:
    """Grad-CAM (Selvaraju et al. 2017): ReLU(sum_k w_k A_k), w_k the spatial mean of dY/dA_k."""
    weights = gradients.mean(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
    return (weights * activations).sum(dim=1).relu()  # (B, h, w)


def grad_cam_pp(activations: Tensor, gradients: Tensor) -> Tensor:
    """Grad-CAM++ (Chattopadhay et al. 2018), with the exponential-score closed form for alpha."""
    g2, g3 = gradients.pow(2), gradients.pow(3)
    total = activations.sum(dim=(2, 3), keepdim=True)  # (B, C, 1, 1): sum_ab A_ab
    alpha = g2 / (2 * g2 + total * g3 + _EPS)  # (B, C, h, w)
    alpha = torch.where(gradients != 0, alpha, torch.zeros_like(alpha))
    weights = (alpha * gradients.relu()).sum(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
    return (weights * activations).sum(dim=1).relu()


def xgrad_cam(activations: Tensor, gradients: Tensor) -> Tensor:
    """XGrad-CAM (Fu et al. 2020): w_k = sum_ij (A_ij / sum_ab A_ab) dY/dA_ij."""
    total = activations.sum(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
    weights = (gradients * activations / (total + _EPS)).sum(dim=(2, 3), keepdim=True)
    return (weights * activations).sum(dim=1).relu()


def layer_cam(activations: Tensor, gradients: Tensor) -> Tensor:
    """LayerCAM (Jiang et al. 2021): ReLU(sum_k ReLU(dY/dA_k) * A_k), weights per position."""
    return (gradients.relu() * activations).sum(dim=1).relu()


def eigen_cam(activations: Tensor) -> Tensor:
    """Eigen-CAM (Muhammad & Yeasin 2020): activations projected on their first principal component.

    Not class-discriminative (no gradient). The sign of a principal component is arbitrary; we
    orient it to agree with the mean activation map, so strong activations stay bright.
    """
    batch, channels, h, w = activations.shape
    flat = activations.reshape(batch, channels, h * w).transpose(1, 2)  # (B, hw, C)
    centred = flat - flat.mean(dim=1, keepdim=True)
    vh: Tensor = torch.linalg.svd(centred.double(), full_matrices=False).Vh  # (B, C, C)
    projection = (centred.double() @ vh[:, 0, :, None]).squeeze(2)  # (B, hw)
    mean_map = flat.double().mean(dim=2)  # (B, hw)
    sign = torch.sign((projection * (mean_map - mean_map.mean(1, keepdim=True))).sum(1, keepdim=True))
    sign = torch.where(sign == 0, torch.ones_like(sign), sign)
    return (projection * sign).reshape(batch, h, w).to(activations.dtype).relu()


def score_cam_masks(activations: Tensor, size: tuple[int, int]) -> Tensor:
    """Score-CAM masks: each channel upsampled to ``size`` and scaled to [0, 1]. (B, C, H, W)."""
    masks = F.interpolate(activations, size=size, mode="bilinear", align_corners=False)
    low = masks.amin(dim=(2, 3), keepdim=True)
    high = masks.amax(dim=(2, 3), keepdim=True)
    return (masks - low) / (high - low).clamp_min(_EPS)


def score_cam(activations: Tensor, channel_scores: Tensor) -> Tensor:
    """Score-CAM (Wang et al. 2020): ReLU(sum_k softmax_k(score of x * mask_k) A_k).

    ``channel_scores`` (B, C) is the target score of the input masked by each channel's mask.
    """
    weights = channel_scores.softmax(dim=1)[:, :, None, None]  # (B, C, 1, 1)
    return (weights * activations).sum(dim=1).relu()
