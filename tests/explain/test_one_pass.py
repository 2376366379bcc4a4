"""cam() without select= picks its layer in the forward pass that computes the map: no probe pass."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from hookscope.explain.cam import CAM_METHODS, cam
from hookscope.explain.layers import pick_layer

torch.manual_seed(0)


def _net() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5),
    ).eval()  # fmt: skip


class Doubles(nn.Module):
    """The parent changes its conv's output in place after the conv's hook saw it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x)
        y.mul_(2)
        return self.head(y.mean(dim=(2, 3)))


def _forwards(model: nn.Module) -> list[int]:
    count = [0]
    model.register_forward_pre_hook(lambda m, a: count.__setitem__(0, count[0] + 1))
    return count


@pytest.mark.parametrize("method", CAM_METHODS)
def test_the_layer_is_found_in_the_same_pass(method: str) -> None:
    torch.manual_seed(0)  # its own draw: a map that is not flat (an all-zero map warns), whatever ran before
    model, x = _net(), torch.rand(2, 3, 12, 12)
    named = cam(model, x, method, target=1, select=pick_layer(model, x)[0])
    count = _forwards(model)
    found = cam(model, x, method, target=1, batch_size=4)
    masked = 2 * 2 if method == "scorecam" else 0  # 8 channels, 4 at a time, for each of 2 images
    assert count[0] == 1 + masked
    torch.testing.assert_close(found, named)


@pytest.mark.parametrize("method", ["gradcam", "eigencam"])
def test_an_output_changed_in_place_later_costs_one_more_pass_and_stays_right(method: str) -> None:
    model, x = Doubles().eval(), torch.rand(1, 3, 8, 8)
    assert pick_layer(model, x) == ("conv", 0)
    named = cam(model, x, method, target=2, select="conv")
    count = _forwards(model)
    found = cam(model, x, method, target=2)
    assert count[0] == 2
    torch.testing.assert_close(found, named)
    # the oracle: Grad-CAM / Eigen-CAM of the doubled map, written out
    a = 2 * model.conv(x).detach()
    if method == "gradcam":
        a.requires_grad_(True)
        (g,) = torch.autograd.grad(model.head(a.mean(dim=(2, 3)))[0, 2], a)
        raw = (g.mean(dim=(2, 3), keepdim=True) * a).sum(1).relu().detach()
        assert raw.amax() > raw.amin()  # not flat: the comparison below means something
        want = (raw - raw.amin()) / (raw.amax() - raw.amin())
        torch.testing.assert_close(found, want, atol=1e-5, rtol=1e-4)


def test_a_call_that_never_ran_is_named() -> None:
    model, x = _net(), torch.rand(1, 3, 8, 8)
    with pytest.raises(Exception, match=r"layer '2' ran 1 time\(s\) in this forward; call=3 does not exist"):
        cam(model, x, "eigencam", select="2", call=3)
