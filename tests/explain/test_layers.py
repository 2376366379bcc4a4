"""The layer a CAM reads without ``select=``: the last spatial map on a CNN, the tokens the last
attention reads on a vision transformer, named in words a user knows.

Oracle for the transformer's choice: ``torch.autograd.grad`` of the class score with respect to each
candidate's tokens. After the last attention the classifier reads the class token alone, so the
gradient at every patch token there is exactly zero (a flat map); at the chosen layer it is not.
"""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import Tensor, nn

import hookscope
from hookscope.errors import CaptureWarning
from hookscope.explain.layers import choose_layer, pick_layer


def small_vit() -> nn.Module:
    torch.manual_seed(0)
    vit = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=3, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
    ).eval()
    nn.init.normal_(vit.heads.head.weight, std=0.5)  # torchvision starts the head at zero: no gradient at all
    return vit


def patch_gradient(model: nn.Module, x: Tensor, site: str, target: int) -> Tensor:
    """d score / d tokens at ``site``, patch tokens only (the class token dropped)."""
    with hookscope.capture(model, site, detach=False, clone=False) as cap:
        out = model(x)
    (grad,) = torch.autograd.grad(out[:, target].sum(), cap[site].output)
    return grad[:, 1:]


def test_on_a_vision_transformer_it_is_the_input_of_the_last_attention() -> None:
    vit, x = small_vit(), torch.randn(2, 3, 32, 32)
    choice = choose_layer(vit, x)
    last = "encoder.layers.encoder_layer_2"
    assert (choice.layer, choice.call) == (f"{last}.ln_1", 0)
    assert choice.words == (f"`{last}.ln_1`, in block `{last}`: the tokens the last attention "
                            f"(`{last}.self_attention`) reads")  # fmt: skip
    for later in (last, "encoder.ln"):  # what a "last token grid" rule would pick: no patch gets a gradient
        assert torch.count_nonzero(patch_gradient(vit, x, later, 3)) == 0
    assert torch.count_nonzero(patch_gradient(vit, x, choice.layer, 3)) > 0
    heat = hookscope.cam(vit, x, target=3)
    assert torch.equal(heat, hookscope.cam(vit, x, target=3, select=choice.layer))
    assert heat.std() > 0.05  # a map, not flat
    with pytest.warns(CaptureWarning, match=r"'encoder.layers.encoder_layer_2' .* gradient at that layer is zero"):
        assert hookscope.cam(vit, x, target=3, select=last).abs().max() == 0  # the flat map it avoids


def test_on_a_cnn_it_is_the_last_spatial_map_and_a_shared_module_is_named_by_its_neighbour() -> None:
    resnet = torchvision.models.resnet18().eval()
    assert choose_layer(resnet, torch.randn(1, 3, 64, 64)) == ("layer4", 0, "`layer4`: the last spatial map")
    torch.manual_seed(0)
    act = nn.ReLU()
    shared = nn.Sequential(nn.Conv2d(3, 4, 3), act, nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4), act, nn.Flatten()).eval()
    shared.add_module("6", nn.Linear(4 * 12 * 12, 3))
    order = [name for name, _ in shared.named_children()]
    assert order == ["0", "1", "2", "3", "5", "6"]  # the ReLU is registered once, as "1", and runs twice
    choice = choose_layer(shared, torch.randn(1, 3, 16, 16))
    assert choice == ("1", 1, "`1` (the second of 2 calls, after `3`): the last spatial map")
    assert pick_layer(shared, torch.randn(1, 3, 16, 16)) == ("1", 1)


def test_no_map_at_all_says_how_to_choose() -> None:
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    with pytest.raises(hookscope.SelectionError, match="pass select=NAME"):
        choose_layer(mlp, torch.randn(1, 3, 2, 2))
