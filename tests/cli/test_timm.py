"""timm models on the command line, as torchvision's: ``timm:NAME`` and ``timm.models:NAME`` take their
input size, resize, interpolation, mean and std from the model's own ``pretrained_cfg`` (checked against
timm's own eval transform of the same photo), say so on stderr in one line; a wrong size gets a hint
naming ``--size``; an error inside timm's factory names the user's spec. timm's ``test_*`` models are
small (160x160, random init: ``pretrained=False``, nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest
import skimage.data
import torch
from PIL import Image

from hookscope.cli import main
from hookscope.cli.inputs import load_input
from hookscope.cli.models import load_model

timm = pytest.importorskip("timm")
timm_data = pytest.importorskip("timm.data")


@pytest.fixture
def cat(tmp_path: Path) -> Path:
    path = tmp_path / "cat.png"
    Image.fromarray(skimage.data.chelsea()).save(path)
    return path


@pytest.mark.parametrize("spec", ["timm:test_vit", "timm.models:test_vit"])
def test_the_input_is_what_timms_own_config_asks_for(cat: Path, spec: str) -> None:
    loaded = load_model(spec)
    config = timm_data.resolve_data_config(model=loaded.model)  # 160, crop_pct 0.95, bicubic, mean/std 0.5
    assert (loaded.preprocess.size, loaded.preprocess.resize) == (160, 168)  # floor(160 / 0.95)
    assert (loaded.preprocess.mean, loaded.preprocess.std) == (config["mean"], config["std"]) == ((0.5,) * 3,) * 2
    x = load_input([str(cat)], loaded.preprocess).x
    theirs = timm_data.create_transform(**config)(Image.open(cat).convert("RGB"))  # PIL's bicubic, then the crop
    assert x.shape == (1, 3, 160, 160) == (1, *theirs.shape)
    assert (x[0] - theirs).abs().mean() < 0.01  # torch's antialiased bicubic against PIL's: a level or so
    assert loaded.labels is not None and len(loaded.labels) == 1000


def test_report_says_on_stderr_where_the_size_came_from(
    cat: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r"
    torch.manual_seed(0)
    assert main(["report", "timm:test_resnet", str(cat), "--out", str(out), "--max-layers", "4"]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "pretrained_cfg" in line]
    assert said == [
        "hookscope: note: images prepared as timm:test_resnet's timm config (pretrained_cfg) asks: 160x160 after a "
        "bilinear resize to 168, mean 0.5, 0.5, 0.5, std 0.5, 0.5, 0.5; --size, --mean, --std change it"
    ]
    assert (out / "index.html").is_file()


def test_a_wrong_size_gets_a_hint_naming_size(cat: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cam", "timm.models:test_vit3", str(cat), "--size", "96", "--out", str(tmp_path / "c.png")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert "with --size, --mean, --std as given: 96x96" in err[0]
    assert err[1].startswith("hookscope: error: the model's forward raised AssertionError: Input height (96)")
    assert "the images were prepared at 96x96: pass --size N with the side the model takes" in err[1]
    assert len(err) == 2 and not (tmp_path / "c.png").exists()


def test_timm_create_model_asks_for_a_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cam", "timm:create_model", "random:1x3x8x8", "--out", str(tmp_path / "c.png")]) == 1
    assert capsys.readouterr().err.strip() == (
        "hookscope: error: timm:create_model needs a model name, which a spec cannot pass; write timm:NAME, such "
        "as timm:vit_tiny_patch16_224, which calls timm.create_model(NAME, pretrained=False)"
    )
    assert main(["cam", "timm:test_vitt", "random:1x3x8x8", "--out", str(tmp_path / "c.png")]) == 1
    assert "timm has no model 'test_vitt'; closest: test_vit" in capsys.readouterr().err


def test_an_error_inside_timms_factory_names_the_spec_not_hookscope(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cam", "timm.models:create_model", "random:1x3x8x8", "--out", str(tmp_path / "c.png")]) == 1
    err = capsys.readouterr().err.strip()
    assert "TypeError: create_model() missing 1 required positional argument: 'model_name'" in err
    assert "(raised by timm.models's create_model, which the spec 'timm.models:create_model' calls with no " in err
    assert "hookscope" not in err.removeprefix("hookscope: error:").replace("hookscope: ", "")
    assert "models.py" not in err


def test_timm_weights_load_from_a_state_dict(tmp_path: Path) -> None:
    torch.manual_seed(0)
    saved = timm.create_model("test_resnet").state_dict()
    torch.save(saved, tmp_path / "w.pt")
    loaded = load_model("timm:test_resnet", weights=str(tmp_path / "w.pt"))
    assert all(torch.equal(v, saved[k]) for k, v in loaded.model.state_dict().items())
    assert not any("random" in note for note in loaded.notes)
