"""cam() on two shapes a new user meets: torchvision's GoogLeNet as it is built (training mode, a
negated score) against a hand-written Grad-CAM, and a PiT-like stage returning ``(x, aux)`` whose
first tensor gets no gradient from the score."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import Tensor, nn

from hookscope.errors import CaptureWarning, SelectionError
from hookscope.explain.cam import cam


def hand_grad_cam(model: nn.Module, layer: nn.Module, x: Tensor, score: object, which: int | None = None) -> Tensor:
    """Grad-CAM written out: ReLU(sum_k mean(dY/dA_k) A_k) at the layer (its tensor ``which`` of a
    tuple), min-maxed, resized bilinearly to the input, min-maxed again."""
    held: list[Tensor] = []
    handle = layer.register_forward_hook(lambda m, i, o: held.append(o if which is None else o[which]))
    try:
        out = model(x)
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(score(out).sum(), held[0])  # type: ignore[operator]
    raw = (grad.mean(dim=(2, 3), keepdim=True) * held[0]).sum(dim=1).relu().detach()
    return _min_max(F.interpolate(_min_max(raw)[:, None], size=x.shape[2:], mode="bilinear")[:, 0])


def _min_max(maps: Tensor) -> Tensor:
    low = maps.amin(dim=(1, 2), keepdim=True)
    return (maps - low) / (maps.amax(dim=(1, 2), keepdim=True) - low)


def test_googlenet_negated_score_equals_a_hand_written_grad_cam() -> None:
    """As built (training mode: Dropout and batch statistics), GoogLeNet's map was random; cam()
    explains it in eval mode. Random init shrinks activations ~1e-12 by inception5b and the network
    is positively homogeneous, so the input is scaled up to give the map a span far above rounding."""
    torch.manual_seed(0)
    model = torchvision.models.googlenet(aux_logits=False, init_weights=True)
    assert model.training
    x = torch.randn(2, 3, 96, 96, generator=torch.Generator().manual_seed(1)) * 1e10
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def negated(out: Tensor) -> Tensor:
        return -out[:, 1]

    with pytest.warns(CaptureWarning, match="ran it in eval mode"):
        ours = cam(model, x, "gradcam", negated, select="inception5b")
    assert model.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    expected = hand_grad_cam(model.eval(), model.inception5b, x, negated)
    assert (expected.amax(dim=(1, 2)) == 1).all() and expected.std() > 0.1  # a map, not a flat one
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)


class Stage(nn.Module):
    """Returns ``(x, aux)`` as a PiT stage returns ``(x, cls_tokens)``; ``aux`` is a map or tokens."""

    def __init__(self, aux_is_map: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.mix = nn.Conv2d(6, 6, 1) if aux_is_map else nn.Linear(6, 6)
        self.aux_is_map = aux_is_map

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = self.conv(x).relu()
        aux = self.mix(x).relu() if self.aux_is_map else self.mix(x.mean(dim=(2, 3)))[:, None]  # (B, 1, 6)
        return x.clone(), aux  # a tensor nothing reads: PiT splits x from the class tokens it reads


class PiTLike(nn.Module):
    """The head reads the stage's second tensor alone: no gradient reaches the first."""

    def __init__(self, aux_is_map: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stage = Stage(aux_is_map)
        self.head = nn.Linear(6, 3)

    def forward(self, x: Tensor) -> Tensor:
        _, aux = self.stage(x)
        return self.head(aux.mean(dim=(2, 3)) if aux.dim() == 4 else aux[:, 0])


X = torch.randn(2, 3, 10, 10, generator=torch.Generator().manual_seed(3))


def test_a_tuple_whose_first_tensor_gets_no_gradient_is_read_at_the_one_that_does() -> None:
    model = PiTLike(aux_is_map=True).eval()
    with pytest.warns(CaptureWarning, match=r"using out\[1\], the first map the target's gradient reaches") as seen:
        ours = cam(model, X, "gradcam", 2, select="stage")
    assert seen[0].filename == __file__
    expected = hand_grad_cam(model, model.stage, X, lambda out: out[:, 2], which=1)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(cam(model, X, "gradcam", 2, select="stage", key="out[1]"), ours, rtol=0, atol=0)


def test_a_tuple_whose_only_reached_tensor_is_no_map_names_what_to_pass() -> None:
    model = PiTLike(aux_is_map=False).eval()
    shapes = r"out\[0\] \(2, 6, 10, 10\), out\[1\] \(2, 1, 6\)"
    with pytest.raises(SelectionError, match=shapes + r".*reaches out\[1\] only.*select="):
        cam(model, X, "gradcam", 2, select="stage")
    unreached = r"no gradient of the target reaches out\[0\] \(it reaches out\[1\] only\).*select="
    with pytest.raises(SelectionError, match=unreached):
        cam(model, X, "gradcam", 2, select="stage", key="out[0]")
