"""Every ``hookscope ...`` line of the documentation (README.md and every docs/**/*.md page, tests/pages.py)
runs as written, and says what its comment claims.

The lines come from the pages' shell blocks (```bash, ```console, or a line starting with
``hookscope `` / ``$ hookscope``). Each is matched, by its longest prefix, to a plan in ``PLANS``:

- ``run``: run through ``hookscope.cli.main`` in a folder holding the files it names (``cat.jpg``,
  ``photos/``, ``my_model.py``, ``batch.pt``, ``resnet18.pth``, ``acts.hookscope``), with the
  plan's ``extra`` options appended where the full size would be slow (``--size 64``), then its
  comment's claim (``# every module: name, type, params, output shape``) is checked;
- ``parse``: too slow to run here (the plan says why and which test runs it); the line must parse
  and its command's ``--help`` must work;
- ``skip``: not a hookscope run at all (``make``), with the reason.

A line without a plan fails ``test_every_readme_command_has_a_plan``. Beside them: the sample
error line (docs/guide/command-line.md) is what a model that raises prints. The ``print(...)  # output``
claims of the pages' Python blocks are checked where tests/test_api.py runs the blocks.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from hookscope.cli import main
from hookscope.cli.parser import build_parser
from tests import pages

SHELL_BLOCKS = ("bash", "console", "sh", "shell")
# outside a shell block, a line is a command only as `hookscope COMMAND` (not a table row such as benchmarks.md's)
COMMAND_NAMES = {
    name
    for action in build_parser()._actions
    if isinstance(action, argparse._SubParsersAction)
    for name in action.choices
}
Check = Callable[[Path, str, str], None]  # (folder, stdout, stderr): assert the comment's claim


@dataclass(frozen=True)
class Plan:
    how: str  # "run", "parse" or "skip"
    why: str = ""  # why a line is not run as written
    extra: tuple[str, ...] = ()  # options appended to keep the run short
    check: Check | None = None


def readme_commands() -> list[tuple[str, str]]:
    """``(command, claim)`` for every command line of the pages' shell blocks, the claim being its comment;
    a command shown on two pages is run once."""
    found = []
    for block in (b for page in pages.pages() for b in pages.blocks(page)):
        for raw in block.body.splitlines():
            line = raw.strip().removeprefix("$ ")
            words = line.split()
            named = len(words) > 1 and words[0] == "hookscope" and words[1] in COMMAND_NAMES
            shell = block.lang in SHELL_BLOCKS or named
            if shell and re.match(r"(hookscope|torchrun|make|python -m hookscope)\s", line):
                command, _, claim = line.partition(" # ")
                if (command.strip(), claim.strip()) not in found:
                    found.append((command.strip(), claim.strip()))
    return found


# -- the claims ---------------------------------------------------------------------------------
def _prints_page(folder: str, *words: str) -> Check:
    def check(cwd: Path, out: str, err: str) -> None:
        page = cwd / folder / "index.html"
        assert out.strip() == str(page.resolve()) and page.is_file()
        text = page.read_text(encoding="utf-8")
        assert all(word in text for word in words), words

    return check


def _explains_logits(folder: str) -> Check:
    """# it returns a dict: the chosen output is explained, without the note naming a first tensor."""

    def check(cwd: Path, out: str, err: str) -> None:
        text = (cwd / folder / "index.html").read_text(encoding="utf-8")
        assert "holds 2 tensors; using the first" not in text and "Top 5" in text  # logits: 10 classes, top 5

    return check


def _prepared_by_timm(cwd: Path, out: str, err: str) -> None:
    """# timm's size, mean and std, from its pretrained_cfg"""
    _prints_page("report", "timm:vit_tiny_patch16_224")(cwd, out, err)
    assert (
        "hookscope: note: images prepared as timm:vit_tiny_patch16_224's timm config (pretrained_cfg) asks: "
        "224x224 after a bicubic resize to 248, mean 0.5, 0.5, 0.5, std 0.5, 0.5, 0.5" in err
    )


def _writes_picture(name: str) -> Check:
    def check(cwd: Path, out: str, err: str) -> None:
        from PIL import Image

        assert out.strip() == name
        with Image.open(cwd / name) as image:
            assert image.format == "PNG" and image.size[0] >= 64

    return check


def _lists_every_module(cwd: Path, out: str, err: str) -> None:
    """# every module: name, type, params, output shape"""
    import torchvision

    lines = out.splitlines()
    assert lines[0].split() == ["name", "type", "params", "output"]
    assert len(lines) == 1 + len(list(torchvision.models.resnet18().named_modules()))
    conv1 = next(line.split() for line in lines if line.startswith("conv1 "))
    assert conv1[1:3] == ["Conv2d", "9,408"] and " ".join(conv1[3:]) == "(1, 64, 112, 112)"


def _describes_store(cwd: Path, out: str, err: str) -> None:
    """# layers, kinds, shapes, sizes, batches, provenance"""
    header = next(line.split() for line in out.splitlines() if line.startswith("site "))
    assert header[:5] == ["site", "type", "kind", "key", "shape"] and "size" in header
    assert re.search(r"^batches +\d+ \(\d+ rows\)", out, re.M) and re.search(r"^made by +hookscope ", out, re.M)


def _store(name: str) -> Check:
    def check(cwd: Path, out: str, err: str) -> None:
        assert out.strip() == str((cwd / name).resolve()) and (cwd / name / "manifest.json").is_file()

    return check


def _walks_through_the_hooks(cwd: Path, out: str, err: str) -> None:
    """# LeNet on handwritten digits: what each hook kind captured, then the report"""
    *walk, last = out.splitlines()
    _prints_page("hookscope-demo", "LeNet on handwritten digits", "scikit-learn")(cwd, last, err)
    assert walk[0].startswith("What each hook kind captured")
    kinds = [line.split()[:2] for line in walk[1:]]
    assert kinds == [[site, kind] for site in ("conv1", "conv2") for kind in KINDS_DRAWN]


def _draws_four_kinds(cwd: Path, out: str, err: str) -> None:
    """# each layer's input, output and both gradients"""
    _prints_page("report", "lenet on digit.png")(cwd, out, err)
    card = re.search(r'<article class="card layer".*?</article>', (cwd / "report" / "index.html").read_text(), re.S)
    assert card is not None
    assert re.findall(r'<div class="kind">(.*?)</div>', card.group(0)) == [
        "input",
        "output",
        "gradient · grad_input",
        "gradient · grad_output",
    ]


KINDS_DRAWN = ("input", "output", "grad_input", "grad_output")


def _demo_help(cwd: Path, out: str, err: str) -> None:
    """# EfficientNet-Lite0 on a bundled photo -> hookscope-demo/index.html"""
    assert "default: hookscope-demo" in out and "efficientnet-lite0" in out


PLANS: dict[str, Plan] = {
    "make ": Plan("skip", "sets up .venv and runs the whole suite or the full demo (minutes); CI runs `make test`"),
    "hookscope demo": Plan(
        "parse", "the full EfficientNet-Lite0 report takes ~20 s on 2 cores; `make demo` runs it", check=_demo_help
    ),
    "hookscope demo --model lenet": Plan("run", check=_walks_through_the_hooks),
    "hookscope demo --model minilm": Plan("run", check=_prints_page("hookscope-demo", "MiniLM", "[CLS]")),
    "hookscope report minilm": Plan("run", check=_prints_page("report", "encoder.layer.5.attention.self", "mat")),
    "hookscope list torchvision:resnet18": Plan("run", check=_lists_every_module),
    "hookscope list my_model.py:build": Plan("run"),
    "hookscope report efficientnet-lite0 cat.jpg": Plan(
        "parse", "dozens of EfficientNet layers with gradients (12-28 s); tests/cli/test_cli.py runs this report"
    ),
    "hookscope report torchvision:resnet18 cat.jpg": Plan(
        "run", extra=("--size", "64"), check=_prints_page("report", "torchvision:resnet18")
    ),
    "hookscope report my_model.py:build_model batch.pt": Plan("run", check=_prints_page("report", "batch.pt")),
    "hookscope report my_model.py:two_heads cat.jpg": Plan(
        "run", extra=("--size", "64"), check=_explains_logits("report")
    ),
    "hookscope report timm:vit_tiny_patch16_224 cat.jpg": Plan("run", check=_prepared_by_timm),
    "hookscope cam efficientnet-lite0 photo.jpg": Plan("run", check=_writes_picture("cam.png")),
    "hookscope cam mobilenet-v2 photo.jpg": Plan("run", extra=("--size", "96"), check=_writes_picture("panel.png")),
    "hookscope report lenet digit.png": Plan("run", check=_draws_four_kinds),
    "hookscope capture lenet": Plan("run", check=_store("run.hookscope")),
    "hookscope extract efficientnet-lite0 photos/": Plan("run", extra=("--size", "64"), check=_store("acts.hookscope")),
    "torchrun ": Plan(
        "run",
        "two processes: run here as one (`hookscope extract ...`); tests/test_distributed.py runs torchrun",
        check=_store("acts.hookscope"),
    ),
    "hookscope info acts.hookscope": Plan("run", check=_describes_store),
    "hookscope report --from acts.hookscope": Plan("run", check=_prints_page("report", "conv1")),
}


def plan_of(command: str) -> Plan:
    """The plan of the longest prefix of ``command`` in PLANS."""
    prefixes = [p for p in PLANS if command.startswith(p)]
    assert prefixes, f"documentation line without a plan in tests/test_readme_commands.py: {command}"
    return PLANS[max(prefixes, key=len)]


# -- the files the lines name ---------------------------------------------------------------------
MY_MODEL = """\
import torch
from collections import OrderedDict
from torch import nn


class Head(nn.Module):
    def __init__(self, fail=False):
        super().__init__()
        self.fail, self.fc = fail, nn.Linear(16, 10)

    def forward(self, x):
        if self.fail:
            raise ValueError("shapes do not line up")
        return self.fc(x.mean(dim=(2, 3)))


def build_model(fail=False):
    encoder = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 16, 3))
    return nn.Sequential(OrderedDict(encoder=encoder, head=Head(fail)))


def build():
    return build_model()


def broken():
    return build_model(fail=True)


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.box = build_model(), nn.Linear(10, 4)

    def forward(self, x):
        logits = self.body(x)
        return {"box": self.box(logits), "logits": logits}


def two_heads():
    return TwoHeads()
"""


def make_files(folder: Path, command: str) -> None:
    """The files ``command`` reads, made small in ``folder``."""
    words = set(shlex.split(command))
    if words & {"cat.jpg", "photo.jpg", "photos/"}:
        import skimage.data
        from PIL import Image

        cat, coffee = Image.fromarray(skimage.data.chelsea()), Image.fromarray(skimage.data.coffee())
        for name in ("cat.jpg", "photo.jpg"):
            cat.save(folder / name)
        (folder / "photos").mkdir()
        cat.save(folder / "photos" / "chelsea.jpg")
        coffee.save(folder / "photos" / "coffee.jpg")
    if any(word.startswith("my_model.py:") for word in words):
        (folder / "my_model.py").write_text(MY_MODEL)
    if "digit.png" in words:
        from hookscope.zoo import lenet

        lenet.digit_picture(lenet.digits("test")[0][0]).save(folder / "digit.png")
    if "batch.pt" in words:
        torch.save(torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)), folder / "batch.pt")
    if "resnet18.pth" in words:
        import torchvision

        torch.save(torchvision.models.resnet18().state_dict(), folder / "resnet18.pth")
    if words & {"info", "--from"}:
        assert main(["extract", "lenet", "random:8x1x32x32", "--select", "conv1", "conv2", "--batch-size", "4",
                     "--out", str(folder / "acts.hookscope")]) == 0  # fmt: skip


# -- the tests ----------------------------------------------------------------------------------
COMMANDS = readme_commands()


def test_every_readme_command_has_a_plan() -> None:
    assert len(COMMANDS) >= 15
    for command, claim in COMMANDS:
        plan = plan_of(command)
        assert plan.how in ("run", "parse", "skip")
        assert plan.how == "run" or plan.why, f"say why {command!r} is not run"
        if claim and plan.how != "skip":
            assert plan.check is not None or plan.how == "parse", f"nothing checks the claim of {command!r}: {claim}"


@pytest.mark.parametrize(("command", "claim"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_readme_command(command: str, claim: str, tmp_path: Path, monkeypatch, capsys) -> None:
    plan = plan_of(command)
    if plan.how == "skip":
        pytest.skip(plan.why)
    argv = shlex.split(re.sub(r"^(torchrun .*?-m hookscope|python -m hookscope|hookscope)\s", "", command))
    monkeypatch.chdir(tmp_path)
    if plan.how == "parse":
        build_parser().parse_args(argv)  # every option of the line exists and takes what it is given
        with pytest.raises(SystemExit) as done:
            main([argv[0], "--help"])
        assert done.value.code == 0
    else:
        make_files(tmp_path, command)
        capsys.readouterr()
        code = main([*argv, *plan.extra])
        out, err = capsys.readouterr()
        assert code == 0, err
    if plan.check is not None:
        plan.check(tmp_path, *((out, err) if plan.how == "run" else (capsys.readouterr().out, "")))


def test_the_sample_error_line_is_what_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    """The documentation's one-line error of a model whose forward raises, word for word."""
    sample = next(line for page in pages.pages() for line in page.read_text(encoding="utf-8").splitlines()
                  if line.startswith("hookscope: error: the model's forward raised"))  # fmt: skip
    monkeypatch.chdir(tmp_path)
    make_files(tmp_path, "my_model.py:broken batch.pt")
    code = main(["report", "my_model.py:broken", "batch.pt", "--out", "report"])
    err = capsys.readouterr().err
    assert code == 1 and sample in err.splitlines()
    assert not (tmp_path / "report").exists()
