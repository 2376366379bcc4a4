"""Models that do not take one image: two inputs from a .pt (tuple or dict), token ids with gradients,
and text models in ``cam``, ``capture`` and ``extract``. Oracles: the same model called by hand, and
gradients from torch.autograd."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hookscope.cli import main
from hookscope.cli.text_inputs import load_text_model
from hookscope.store.reader import load
from hookscope.transformer.text import encode

MODELS = """
import torch
from torch import nn

class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.left, self.right = nn.Linear(4, 3), nn.Linear(5, 3)
        self.head = nn.Linear(3, 2)

    def forward(self, a, b):
        return self.head(self.left(a) + self.right(b))

class Tokens(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 6)
        self.mix = nn.Linear(6, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, ids):
        return self.head(torch.tanh(self.mix(self.embed(ids))).mean(1))

def pair():
    return Pair().eval()

def tokens():
    return Tokens().eval()
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "nets.py"
    path.write_text(MODELS)
    return path


def _module(path: Path):  # the file's models, built by hand for the oracle
    import importlib.util

    spec = importlib.util.spec_from_file_location("nets_oracle", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("held", ["tuple", "dict"])
def test_a_pt_of_two_tensors_feeds_a_model_with_two_inputs(held: str, models: Path, tmp_path: Path, capsys) -> None:
    a, b = torch.randn(2, 4), torch.randn(2, 5)
    torch.save((a, b) if held == "tuple" else {"b": b, "a": a}, tmp_path / "inputs.pt")  # by name, in any order
    out = tmp_path / "acts.hookscope"
    code = main(["capture", f"{models}:pair", str(tmp_path / "inputs.pt"), "--select", "left", "right", "head",
                 "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    net = _module(models).pair()
    run = load(out)
    with torch.no_grad():
        torch.testing.assert_close(run["left"].output, net.left(a))
        torch.testing.assert_close(run["right"].output, net.right(b))
        torch.testing.assert_close(run["head"].output, net(a, b))


@pytest.mark.parametrize("command", ["cam"])  # report: the first input, the rest held (tests/cli/test_several.py)
def test_cam_refuses_several_inputs_in_one_line(command: str, models: Path, tmp_path: Path, capsys) -> None:
    torch.save((torch.randn(1, 4), torch.randn(1, 5)), tmp_path / "inputs.pt")
    out = tmp_path / ("c.png" if command == "cam" else "r")
    code = main([command, f"{models}:pair", str(tmp_path / "inputs.pt"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert f"{command} explains one input tensor and inputs.pt holds several (a tuple or a dict)" in err


def test_token_ids_take_gradients_at_every_layer(models: Path, tmp_path: Path, capsys) -> None:
    ids = torch.tensor([[1, 4, 2, 7], [3, 3, 9, 0]])
    torch.save(ids, tmp_path / "ids.pt")
    out = tmp_path / "grads.hookscope"
    code = main(["capture", f"{models}:tokens", str(tmp_path / "ids.pt"), "--select", "embed", "mix",
                 "--kinds", "output", "grad_output", "--target", "2", "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    net = _module(models).tokens()
    embedded = net.embed(ids)
    mixed = net.mix(embedded)
    score = net.head(torch.tanh(mixed).mean(1))[:, 2].sum()
    d_embedded, d_mixed = torch.autograd.grad(score, [embedded, mixed])
    run = load(out)
    torch.testing.assert_close(run["embed"].grad_output, d_embedded)
    torch.testing.assert_close(run["mix"].grad_output, d_mixed)
    assert all(p.grad is None for p in net.parameters())
    report = tmp_path / "report"
    code = main(["report", f"{models}:tokens", str(tmp_path / "ids.pt"), "--grads", "--out", str(report)])
    assert code == 0, capsys.readouterr().err
    assert (report / "index.html").is_file()


def test_a_text_model_in_cam_points_to_token_attribution(tmp_path: Path, capsys) -> None:
    code = main(["cam", "minilm", "The cat sat on the mat.", "--out", str(tmp_path / "c.png")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert "minilm is a text model; for the tokens behind its output use hookscope.token_attribution" in err
    assert "does not exist" not in err and "not an image" not in err


def test_a_text_model_in_extract_is_refused_with_the_reason(tmp_path: Path, capsys) -> None:
    code = main(["extract", "minilm", "The cat sat.", "--out", str(tmp_path / "a.hookscope")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert "extract reads folders of images and minilm is a text model" in err


def test_capture_reads_a_sentence_and_a_txt_file(tmp_path: Path, capsys) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("A kitten slept.\n\nThe cat sat on the mat.\n")
    out = tmp_path / "text.hookscope"
    code = main(["capture", "minilm", str(lines), "Stocks fell.", "--select", "encoder.layer.5.output",
                 "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    text = load_text_model("minilm")
    inputs = encode(text.tokenizer, ["A kitten slept.", "The cat sat on the mat.", "Stocks fell."])
    with torch.no_grad():
        expected = text.model(**inputs).last_hidden_state  # layer 5's output is the last hidden state
    torch.testing.assert_close(load(out)["encoder.layer.5.output"].output, expected)


@pytest.mark.parametrize("command", ["capture", "extract"])
@pytest.mark.parametrize("given", ["lines.txt", "The cat sat on the mat."])
def test_text_given_to_an_image_model_is_called_text(command: str, given: str, tmp_path: Path, capsys) -> None:
    (tmp_path / "lines.txt").write_text("The cat sat.\n")
    spec = str(tmp_path / given) if given.endswith(".txt") else given
    code = main([command, "lenet", spec, "--out", str(tmp_path / "a.hookscope")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert "and this model reads images; text goes to a text model (minilm, hf:PATH)" in err
    assert "does not exist" not in err and "cannot read image" not in err
