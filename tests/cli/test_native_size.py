"""torchvision:NAME gets the input size of its default weights' preset: inception_v3 at 299 (after
a 342 resize), efficientnet_b1 at 240; each against torchvision's own transforms of the same photo."""

from __future__ import annotations

from pathlib import Path

import pytest
import skimage.data
import torch
from PIL import Image

from hookscope.cli.inputs import load_input
from hookscope.cli.models import load_model
from hookscope.zoo.preprocess import IMAGENET

models = pytest.importorskip("torchvision.models")


@pytest.mark.filterwarnings("ignore:The default weight initialization of inception_v3:FutureWarning")  # torchvision's
@pytest.mark.parametrize(("name", "crop", "resize"), [("inception_v3", 299, 342), ("efficientnet_b1", 240, 255)])
def test_the_input_is_torchvisions_preset_of_the_default_weights(
    tmp_path: Path, name: str, crop: int, resize: int
) -> None:
    loaded = load_model(f"torchvision:{name}")
    assert (loaded.preprocess.size, loaded.preprocess.resize) == (crop, resize)
    Image.fromarray(skimage.data.chelsea()).save(tmp_path / "cat.png")
    x = load_input([str(tmp_path / "cat.png")], loaded.preprocess).x
    transforms = models.get_model_weights(name).DEFAULT.transforms()
    theirs = transforms(torch.from_numpy(skimage.data.chelsea()).permute(2, 0, 1))
    assert x.shape == (1, 3, crop, crop)
    torch.testing.assert_close(x[0], theirs, atol=1e-6, rtol=0)
    if name == "inception_v3":
        with torch.no_grad():
            assert loaded.model(x).shape == (1, 1000)  # the random-init model runs at its native size


def test_a_model_whose_weights_use_the_usual_preset_keeps_it() -> None:
    assert load_model("torchvision:resnet18").preprocess == IMAGENET
