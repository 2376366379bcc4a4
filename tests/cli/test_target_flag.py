"""``--target`` on any output: the forms a shell can pass, differentiated as the API differentiates them.
Oracle: ``torch.autograd.grad`` of the same score written by hand, on the hand-written models of
``tests/handwritten.py`` (a U-Net, an ``nn.Transformer`` seq2seq, a token model)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.cli import main
from hookscope.cli.target_flag import FORMS, ShellTarget, parse_target
from hookscope.store.reader import load
from tests import handwritten

HANDWRITTEN = str(Path(handwritten.__file__))


def grads_by_hand(model: nn.Module, inputs: tuple[Tensor, ...], sites: list[str], score: object) -> list[Tensor]:
    """d score(model(*inputs)) / d (each site's output), by torch.autograd.grad."""
    seen: dict[str, Tensor] = {}
    hooks = [model.get_submodule(s).register_forward_hook(lambda m, i, o, s=s: seen.__setitem__(s, o)) for s in sites]
    try:
        out = model(*inputs)
    finally:
        for hook in hooks:
            hook.remove()
    assert callable(score)
    return list(torch.autograd.grad(score(out), [seen[s] for s in sites]))


def capture_cli(tmp_path: Path, capsys, model: str, inputs: object, sites: list[str], target: str) -> dict[str, Tensor]:
    torch.save(inputs, tmp_path / "in.pt")
    out = tmp_path / "run.hookscope"
    argv = ["capture", f"{HANDWRITTEN}:{model}", str(tmp_path / "in.pt"), "--select", *sites,
            "--kinds", "grad_output", f"--target={target}", "--out", str(out)]  # fmt: skip
    code = main(argv)
    assert code == 0, capsys.readouterr().err
    run = load(out)
    return {site: run[site].grad_output for site in sites}


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("sum", lambda o: o.sum()),
        ("mean", lambda o: o.mean(dim=(1, 2, 3)).sum()),
        ("norm", lambda o: o.flatten(1).norm(dim=1).sum()),
        ("0,16,16", lambda o: o[:, 0, 16, 16].sum()),
        ("0,5", lambda o: o[:, 0, 5].sum()),  # the axis left is summed
        ("[:, :, 2:6, -1]", lambda o: o[:, :, 2:6, -1].sum()),
        ("[1, 0, 3, 3]", lambda o: o[1, 0, 3, 3]),  # one row picked: the other scores 0
        (f"{HANDWRITTEN}:centre_pixel", lambda o: o[:, 0, 16, 16].sum()),
    ],
)
def test_capture_of_a_unet_differentiates_the_target_given(text: str, score: object, tmp_path: Path, capsys) -> None:
    x = torch.randn(2, 3, 32, 32)
    sites = ["down1.3", "bottleneck.0", "dec1.2"]
    got = capture_cli(tmp_path, capsys, "unet", x, sites, text)
    expected = grads_by_hand(handwritten.unet(), (x,), sites, score)
    for site, want in zip(sites, expected, strict=True):
        torch.testing.assert_close(got[site], want, msg=site)
        assert want.abs().sum() > 0


def test_capture_of_a_seq2seq_differentiates_the_last_tokens_logit(tmp_path: Path, capsys) -> None:
    src, tgt = torch.tensor([[1, 5, 2, 9, 4, 3], [7, 7, 1, 0, 2, 8]]), torch.tensor([[1, 3, 3, 6], [2, 9, 4, 1]])
    sites = ["src_embed", "transformer.encoder", "transformer.decoder.layers.0.norm1"]
    got = capture_cli(tmp_path, capsys, "seq2seq", {"src": src, "tgt": tgt}, sites, "[:, -1, 3]")
    expected = grads_by_hand(handwritten.seq2seq(), (src, tgt), sites, lambda o: o[:, -1, 3].sum())
    for site, want in zip(sites, expected, strict=True):
        torch.testing.assert_close(got[site], want, msg=site)
        assert want.abs().sum() > 0


def test_capture_of_a_token_model_takes_a_position_in_each_row(tmp_path: Path, capsys) -> None:
    ids = torch.tensor([[1, 4, 2, 7, 10], [3, 3, 9, 0, 6]])
    sites = ["embed", "encoder.layers.0.linear2"]
    got = capture_cli(tmp_path, capsys, "token_model", ids, sites, "-1,3")
    expected = grads_by_hand(handwritten.token_model(), (ids,), sites, lambda o: o[:, -1, 3].sum())
    for site, want in zip(sites, expected, strict=True):
        torch.testing.assert_close(got[site], want, msg=site)


def test_cam_takes_a_shell_target_as_the_api_takes_the_callable() -> None:
    model, x = handwritten.unet(), torch.randn(2, 3, 32, 32)
    by_hand = hookscope.cam(model, x, target=lambda o: o.mean(dim=(1, 2, 3)), select="bottleneck")
    assert torch.equal(hookscope.cam(model, x, target=parse_target("mean"), select="bottleneck"), by_hand)
    by_hand = hookscope.cam(model, x, target=lambda o: o.flatten(1).norm(dim=1), select="dec1")
    assert torch.equal(hookscope.cam(model, x, target=parse_target("norm"), select="dec1"), by_hand)


@pytest.mark.parametrize(("model", "target"), [("unet", "norm"), ("token_model", "[:, 0, 2]")])
def test_report_grads_runs_on_a_unet_and_a_token_model(model: str, target: str, tmp_path: Path, capsys) -> None:
    x = torch.randn(1, 3, 32, 32) if model == "unet" else torch.tensor([[1, 4, 2, 7]])
    torch.save(x, tmp_path / "in.pt")
    argv = ["report", f"{HANDWRITTEN}:{model}", str(tmp_path / "in.pt"), "--grads", f"--target={target}",
            "--max-layers", "4", "--out", str(tmp_path / "r")]  # fmt: skip
    code = main(argv)
    assert code == 0, capsys.readouterr().err
    page = (tmp_path / "r" / "index.html").read_text()
    assert "grad_output" in page


def test_cam_command_on_a_unet_with_a_target(tmp_path: Path, capsys) -> None:
    torch.save(torch.randn(1, 3, 32, 32), tmp_path / "x.pt")
    out = tmp_path / "cam.png"
    code = main(["cam", f"{HANDWRITTEN}:unet", str(tmp_path / "x.pt"), "--target", "sum", "--layer", "bottleneck",
                 "--panel", "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert out.stat().st_size > 0


@pytest.mark.parametrize(
    ("command", "model", "x"),
    [
        ("capture", "unet", torch.randn(1, 3, 32, 32)),
        ("capture", "token_model", torch.tensor([[1, 2, 3]])),
        ("report", "unet", torch.randn(1, 3, 32, 32)),
        ("cam", "unet", torch.randn(1, 3, 32, 32)),
    ],
)
def test_the_default_target_on_a_non_class_output_names_the_flag(
    command: str, model: str, x: Tensor, tmp_path: Path, capsys
) -> None:
    torch.save(x, tmp_path / "x.pt")
    out = tmp_path / ("c.png" if command == "cam" else "out")
    more = ["--kinds", "grad_output"] if command == "capture" else ["--grads"] if command == "report" else []
    code = main([command, f"{HANDWRITTEN}:{model}", str(tmp_path / "x.pt"), *more, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    shape = tuple(handwritten.unet()(x).shape) if model == "unet" else (1, 3, handwritten.VOCAB)
    assert code == 1
    assert err == (
        f"hookscope: error: the model's output has shape {shape}, not (batch, classes), so the default "
        f"target (each row's top-1 class) cannot apply; choose what to explain with --target: {FORMS}"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("3", "--target 3 is a class, which needs a (batch, classes) output, and the model's has shape (1, 3, 11)"),
        ("0,0,0,0", "--target 0,0,0,0 does not index this output of shape (1, 3, 11)"),  # a row has 2 axes
        ("1000", "--target 1000 is a class, which needs a (batch, classes) output"),
    ],
)
def test_a_target_that_does_not_fit_the_output_names_the_flag(target: str, said: str, tmp_path: Path, capsys) -> None:
    torch.save(torch.tensor([[1, 2, 3]]), tmp_path / "x.pt")
    code = main(["capture", f"{HANDWRITTEN}:token_model", str(tmp_path / "x.pt"), "--kinds", "grad_output",
                 "--target", target, "--out", str(tmp_path / "s")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert err.startswith(f"hookscope: error: {said}")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo", f"'foo' is not a target; pass one of: {FORMS}"),
        ("[:, x]", "'[:, x]': 'x' is not an int, a slice (a:b:c) or ...; an index is written like '[:, -1, 3]'"),
        ("missing.py:f", "target file 'missing.py' does not exist"),
        (f"{HANDWRITTEN}:VOCAB", f"'{HANDWRITTEN}:VOCAB' is a int, not a function of the output"),
        (f"{HANDWRITTEN}:nothing", f"'{HANDWRITTEN}' has no 'nothing'"),
    ],
)
def test_a_target_that_is_no_form_is_a_usage_error(text: str, message: str, capsys) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=None) as info:
        parse_target(text)
    assert str(info.value).startswith(message)
    with pytest.raises(SystemExit) as exit_info:
        main(["capture", "lenet", "random:1x1x32x32", "--target", text, "--out", "never"])
    assert exit_info.value.code == 2
    assert f"error: argument --target: {message}" in capsys.readouterr().err


def test_the_forms_parse_to_what_the_api_takes() -> None:
    assert parse_target("285") == 285 and parse_target("-1") == -1
    assert parse_target("norm") == ShellTarget("norm", reduce="norm")
    assert parse_target("0, 5,2") == ShellTarget("0, 5,2", index=(slice(None), 0, 5, 2))
    index = (..., slice(1, 3), slice(None, None, 2))
    assert parse_target("[..., 1:3, ::2]") == ShellTarget("[..., 1:3, ::2]", index=index)
    assert parse_target(f"{HANDWRITTEN}:centre_pixel").__name__ == "centre_pixel"  # type: ignore[union-attr]
