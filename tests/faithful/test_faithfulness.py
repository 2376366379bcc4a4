"""faithfulness(): deletion and insertion equal TorchCAM's metric, ROAD and confidence change equal
pytorch-grad-cam's, a planted model whose truth is known, tokens against a literal re-implementation."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import hookscope
from hookscope.faithful.perturb import counts
from hookscope.report.sections import as_section


def _cnn(classes: int = 5) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, classes),
    ).eval()  # fmt: skip


def _torchcam_metric(
    model: nn.Module, x: torch.Tensor, layer: str, steps: int
) -> tuple[dict[str, float], torch.Tensor]:
    """TorchCAM's own AUCs, and the map its metric ranked (read where it resizes it)."""
    metrics = pytest.importorskip("torchcam.metrics")
    methods = pytest.importorskip("torchcam.methods")
    seen: dict[str, torch.Tensor] = {}
    resize = metrics._resize_cam

    def spy(cam: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        seen["cam"] = cam.detach().clone()
        return resize(cam, shape)

    metrics._resize_cam = spy
    try:
        extractor = methods.GradCAM(model, target_layer=layer)
        metric = metrics.DeletionInsertionMetric(extractor, partial(torch.softmax, dim=-1), steps=steps)
        metric.update(x)
        extractor.remove_hooks()
    finally:
        metrics._resize_cam = resize
    return metric.summary(), seen["cam"]


def test_deletion_and_insertion_equal_torchcams_metric() -> None:
    model, x = _cnn(), torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    theirs, heat = _torchcam_metric(model, x, "2", steps=20)
    ours = hookscope.faithfulness(model, x, heat, metrics=("deletion", "insertion"), convention="torchcam")
    assert ours["map"].deletion_auc.mean().item() == pytest.approx(theirs["deletion_auc"], abs=1e-4)
    assert ours["map"].insertion_auc.mean().item() == pytest.approx(theirs["insertion_auc"], abs=1e-4)
    assert ours.fractions.tolist() == pytest.approx([c / 1024 for c in counts(1024, 20)])


def test_deletion_and_insertion_equal_torchcam_on_efficientnet_and_the_photo() -> None:
    skimage = pytest.importorskip("skimage.data")
    model = hookscope.zoo.efficientnet_lite0()
    x = hookscope.zoo.lite_input(skimage.chelsea())
    theirs, heat = _torchcam_metric(model, x, "_blocks.15", steps=10)
    ours = hookscope.faithfulness(model, x, heat, metrics=("deletion", "insertion"), steps=10,
                                  convention="torchcam", controls=False, batch_size=8)  # fmt: skip
    assert ours["map"].deletion_auc.item() == pytest.approx(theirs["deletion_auc"], abs=1e-4)
    assert ours["map"].insertion_auc.item() == pytest.approx(theirs["insertion_auc"], abs=1e-4)


@pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context:DeprecationWarning")  # grad-cam's numpy use
def test_road_and_confidence_change_equal_pytorch_grad_cam_under_a_seed() -> None:
    road = pytest.importorskip("pytorch_grad_cam.metrics.road")
    mult = pytest.importorskip("pytorch_grad_cam.metrics.cam_mult_image")
    targets_module = pytest.importorskip("pytorch_grad_cam.utils.model_targets")
    model, x = _cnn(), torch.randn(2, 3, 24, 24, generator=torch.Generator().manual_seed(2))
    heat = hookscope.cam(model, x, "gradcam", target=[1, 3], select="2")  # (B, H, W) in [0, 1]
    targets = [targets_module.ClassifierOutputTarget(c) for c in (1, 3)]
    torch.manual_seed(7)
    theirs = road.ROADCombined()(x, heat.numpy(), targets, model)
    change = mult.CamMultImageConfidenceChange()(x, heat.numpy(), targets, model)
    ours = hookscope.faithfulness(model, x, {"gradcam": heat}, target=[1, 3], metrics=("road", "confidence"),
                                  convention="grad-cam", seed=7, controls=False)  # fmt: skip
    assert ours["gradcam"].road.numpy() == pytest.approx(theirs, abs=1e-5)
    assert ours["gradcam"].drop.numpy() == pytest.approx(np.maximum(-change, 0), abs=1e-5)
    assert ours["gradcam"].increase.numpy() == pytest.approx(np.float32(change > 0))


class _TopLeft(nn.Module):
    """Class 1's logit is the mean of the top-left quadrant; class 0's is 0: nothing else matters."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[2] // 2, x.shape[3] // 2
        signal = 8 * x[:, :, :h, :w].mean(dim=(1, 2, 3))
        return torch.stack([torch.zeros_like(signal), signal], dim=1)


def test_a_planted_model_ranks_the_true_map_above_random_above_the_reversed_one() -> None:
    x = torch.ones(2, 3, 16, 16)
    truth = torch.zeros(2, 16, 16)
    truth[:, :8, :8] = 1 + torch.rand(2, 8, 8, generator=torch.Generator().manual_seed(0))
    result = hookscope.faithfulness(_TopLeft(), x, {"truth": truth, "reversed": -truth}, target=1,
                                    metrics=("deletion", "insertion"))  # fmt: skip
    true, reverse, rand = result["truth"], result["reversed"], result["random control"]
    assert counts(256, 20)[5] == 65  # the quadrant's 64 pixels gone from the fifth step on: both logits 0
    assert torch.allclose(true.deletion[:, 5:], torch.tensor(0.5))
    assert torch.allclose(true.insertion[:, 5:], torch.sigmoid(torch.tensor(8.0)))
    assert true.deletion_auc.mean() < rand.deletion_auc.mean() < reverse.deletion_auc.mean()
    assert true.insertion_auc.mean() > rand.insertion_auc.mean() > reverse.insertion_auc.mean()
    assert true.deletion_auc.min() >= 0 and true.insertion_auc.max() <= 1
    assert result.remarks == ["reversed is no better than a random map on deletion, insertion: do not trust it here"]


def test_token_curves_equal_a_literal_reimplementation(minilm: Any, minilm_tokenizer: Any) -> None:
    torch.manual_seed(0)
    head = nn.Linear(384, 3)

    class Classifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert, self.head = minilm, head

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.bert(input_ids=ids).last_hidden_state.mean(dim=1))

    model = Classifier().eval()
    ids = minilm_tokenizer(["the cat sat on the warm mat", "a dog ran far away"], padding=True, return_tensors="pt")
    ids = ids.input_ids
    scores = torch.randn(ids.shape, generator=torch.Generator().manual_seed(3))
    mask = minilm_tokenizer.mask_token_id
    result = hookscope.faithfulness(model, ids, scores, metrics=("deletion", "insertion"), steps=4, baseline=mask,
                                    controls=False)  # fmt: skip
    with torch.no_grad():
        classes = model(ids).argmax(dim=1)
        for b in range(len(ids)):
            order = sorted(range(ids.shape[1]), key=lambda t: (-scores[b, t].item(), t))
            curve = []
            for count in counts(ids.shape[1], 4):
                gone = ids[b].clone()
                gone[order[:count]] = mask
                curve.append(model(gone[None]).softmax(dim=1)[0, classes[b]].item())
            assert result["map"].deletion[b].tolist() == pytest.approx(curve, abs=1e-5)


def test_the_result_shows_itself_and_becomes_a_report_section() -> None:
    model, x = _cnn(), torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(4))
    heat = hookscope.cam(model, x, "gradcam", select="2")
    result = hookscope.faithfulness(model, x, {"gradcam": heat}, metrics=("deletion", "insertion", "confidence"))
    lines = result.table().splitlines()
    assert lines[0].split()[:3] == ["map", "deletion", "AUC"]
    assert [line.split()[0] for line in lines[1:4]] == ["gradcam", "random", "edge"]
    assert f"{result['gradcam'].deletion_auc.item():.4f}" in lines[1]
    assert result.plot().size[0] > 400
    section = as_section(result)
    assert (section.id, section.title) == ("faithfulness", "Is the map faithful?")
    assert "gradcam" in (result._repr_html_() or "")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metrics": ("deletion", "pointing")}, "unknown metric pointing"),
        ({"convention": "lime"}, "unknown convention .lime."),
        ({"baseline": "noise"}, "unknown baseline 'noise'"),
    ],
)
def test_bad_options_are_one_line_errors(kwargs: dict[str, Any], message: str) -> None:
    model, x = _cnn(), torch.randn(1, 3, 8, 8)
    with pytest.raises(hookscope.OptionError, match=message):
        hookscope.faithfulness(model, x, torch.rand(1, 8, 8), **kwargs)


def test_tokens_refuse_image_metrics_and_maps_must_fit() -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(12, 2)).eval()
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(hookscope.OptionError, match="confidence and road perturb images"):
        hookscope.faithfulness(model, ids, torch.rand(1, 3), baseline=0)
    with pytest.raises(hookscope.ShapeError, match="a token map must be"):
        hookscope.faithfulness(model, ids, torch.rand(1, 4), metrics=("deletion",), baseline=0)
    with pytest.raises(hookscope.OptionError, match="a token baseline is the id"):
        hookscope.faithfulness(model, ids, torch.rand(1, 3), metrics=("deletion",))


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning", "ignore::FutureWarning")
def test_pixel_flipping_equals_quantus() -> None:
    quantus = pytest.importorskip("quantus")
    model, x = _cnn(), torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(6))
    attribution = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(7))  # no ties: one order
    labels = model(x).argmax(dim=1)
    metric = quantus.PixelFlipping(features_in_step=32, perturb_baseline=0.0, disable_warnings=True)
    curves = metric(model=model, x_batch=x.numpy(), y_batch=labels.numpy(), a_batch=attribution.numpy(),
                    device="cpu", softmax=True)  # fmt: skip
    ours = hookscope.faithfulness(model, x, attribution, metrics=("deletion",), convention="quantus", steps=24,
                                  controls=False)  # fmt: skip
    assert ours["map"].deletion.numpy() == pytest.approx(np.array(curves), abs=1e-5)
    assert ours["map"].deletion_auc.numpy() == pytest.approx(np.trapezoid(np.array(curves), dx=1, axis=1), abs=1e-4)
    assert ours.fractions.tolist() == pytest.approx([(k + 1) * 32 / 768 for k in range(24)])
    with pytest.raises(hookscope.OptionError, match="Quantus's pixel flipping"):
        hookscope.faithfulness(model, x, attribution, convention="quantus")
