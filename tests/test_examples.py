"""Every script in examples/ runs as its page says, in a subprocess as a user runs it.

train_lenet_watch.py trains, prints the history and alerts, and writes a store that ``hookscope info``
reads and a training report. The picture scripts, run with ``--out`` a temporary folder, write whole
images of the size they draw there and leave docs/images alone; where they print a number, one is
checked against a computation of its own (a hand count, the unbiased HSIC written out, a log-softmax).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import torchvision
import transformers
from PIL import Image

import hookscope
from hookscope.zoo.lenet import digits, lenet

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DOCS = EXAMPLES.parent / "docs" / "images"


def test_the_watch_example_trains_and_writes_its_store_and_report(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "train_lenet_watch.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    accuracy = re.findall(r"step (\d+): loss [\d.]+, test accuracy ([\d.]+)%", done.stdout)
    assert [int(step) for step, _ in accuracy] == [100, 200, 300]
    assert float(accuracy[-1][1]) > 80  # LeNet learns the digits: the watch did not break training
    assert done.stdout.strip().splitlines()[-1] == str(tmp_path / "lenet-report" / "index.html")
    run = hookscope.load(tmp_path / "lenet.hookscope")
    assert run.history("fc1").steps == list(range(0, 300, 10))
    page = (tmp_path / "lenet-report" / "index.html").read_text(encoding="utf-8")
    assert "fc1" in page and "data:image/png;base64," in page and "<script src" not in page


def _example(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "default", "drawn"),
    [
        ("pictures", "pictures", ""),
        ("rollout_digits", "rollout-digits", "rollout.jpg"),
        ("compare_pictures", "compare", "cka.png"),
        ("graph_picture", "graph", "graph.png"),
        ("steer_picture", "steer", "steer_sweep.png"),
        ("faithfulness_picture", "faithfulness", "faithfulness.png"),
        ("inline_picture", "inline", "inline.png"),
    ],
)
def test_the_picture_examples_leave_docs_images_alone_unless_asked(
    name: str, default: str, drawn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as a user would, they write into a folder of their own; the tracked docs/images only with --docs."""
    example = _example(name)
    docs = EXAMPLES.parent / "docs" / "images"
    mine = EXAMPLES / "output" / default  # the ignored folder every example writes under
    for argv, expected in (([], mine), (["--out", "elsewhere"], Path("elsewhere")), (["--docs"], docs)):
        monkeypatch.setattr(sys, "argv", [name, *argv])
        assert example.where() == (expected / drawn if drawn else expected)


def test_the_examples_write_under_one_ignored_folder() -> None:
    """Whatever an example writes by default lands in examples/output/, which git ignores."""
    ignored = subprocess.run(["git", "check-ignore", "-q", str(EXAMPLES / "output" / "runs" / "lenet.hookscope")],
                             cwd=EXAMPLES.parent, check=False)  # fmt: skip
    assert ignored.returncode == 0
    for path in EXAMPLES.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"""default=["'](?!-)""", text) or 'OUTPUT / "' in text, path.name
        assert '"runs"' not in text or 'output" / "runs"' in text, path.name


def _docs_images() -> dict[Path, int]:
    """docs/images' files and their modification times, to see that an example left them alone."""
    return {path: path.stat().st_mtime_ns for path in DOCS.rglob("*") if path.is_file()}


def _run(name: str, folder: Path, *flags: str) -> str:
    """``python examples/NAME.py FLAGS`` run in ``folder`` as a user runs it: its stdout. docs/images stays as is."""
    before = _docs_images()
    done = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *flags],
                          cwd=folder, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert _docs_images() == before, f"{name}.py wrote into docs/images"
    return done.stdout


def _assert_picture(path: Path, kind: str, size: tuple[int, int], exact: bool = False) -> None:
    """``path`` is a whole ``kind`` image (PNG, JPEG), of ``size`` (at least, unless ``exact``), not all one colour."""
    with Image.open(path) as picture:
        assert picture.format == kind, path.name
        picture.verify()  # every byte decodes
    with Image.open(path) as picture:
        if exact:
            assert picture.size == size, path.name
        else:
            assert size[0] <= picture.width <= 4000 and size[1] <= picture.height <= 4000, (path.name, picture.size)
        darkest, lightest = picture.convert("L").getextrema()
        assert lightest - darkest > 100, f"{path.name} is nearly one colour"


def test_the_demo_tours_a_lenet_and_leaves_nothing_behind(tmp_path: Path) -> None:
    printed = _run("demo", tmp_path)
    conv1, conv2, fc1, fc2 = 3 * 6 * 5 * 5 + 6, 6 * 16 * 5 * 5 + 16, 400 * 120 + 120, 120 * 10 + 10  # by hand
    assert re.search(rf"^\(model\)\s+LeNet\s+{conv1 + conv2 + fc1 + fc2:,}$", printed, re.M)
    assert re.search(rf"^features\.0\s+Conv2d\s+{conv1}$", printed, re.M)
    minimum = re.search(r"^features\.0\s+\(4, 6, 28, 28\)\s+(-?[\d.]+)", printed, re.M)
    assert minimum is not None and float(minimum[1]) < 0  # the in-place ReLU did not rewrite the captured output
    assert printed.strip().splitlines()[-1] == "hooks left on the model: []"
    assert list(tmp_path.iterdir()) == []  # a tour: it prints and writes nothing


def test_pictures_py_draws_the_guides_four_pictures(tmp_path: Path) -> None:
    _run("pictures", tmp_path, "--out", str(tmp_path / "out"))
    out = tmp_path / "out"
    assert sorted(path.name for path in out.iterdir()) == ["cams.jpg", "features.png", "flow.png", "gradients.png"]
    for name in ("features.png", "gradients.png", "flow.png"):
        _assert_picture(out / name, "PNG", (300, 200))
    side = 224  # the cat beside the cup: 224 x 448; three methods down, two targets across, 8 px apart
    _assert_picture(out / "cams.jpg", "JPEG", (2 * 2 * side + 8, 3 * side + 2 * 8), exact=True)


def _unbiased_hsic(k: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Song et al. 2012's unbiased HSIC of two Gram matrices, written out with a vector of ones."""
    n, ones = len(k), torch.ones(len(k), 1, dtype=torch.float64)
    k, m = k - torch.diag(torch.diag(k)), m - torch.diag(torch.diag(m))
    first = torch.trace(k @ m)
    second = (ones.T @ k @ ones) * (ones.T @ m @ ones) / ((n - 1) * (n - 2))
    third = 2 / (n - 2) * (ones.T @ k @ m @ ones)
    return ((first + second - third) / (n * (n - 3))).squeeze()


def test_compare_pictures_draws_the_cka_of_trained_against_untrained(tmp_path: Path) -> None:
    printed = _run("compare_pictures", tmp_path, "--out", str(tmp_path))
    _assert_picture(tmp_path / "cka.png", "PNG", (400, 300))
    row = re.search(r"^fc3\s+.*\s([\d.]+)$", printed, re.M)  # the trained fc3 against the untrained fc3
    assert row is not None
    trained = lenet()
    torch.manual_seed(0)
    untrained = type(trained)().eval()
    cross = self_a = self_b = torch.zeros((), dtype=torch.float64)
    with torch.no_grad():
        for batch in digits("test")[0].split(60):  # fc3's output is the logits
            a, b = (model(batch).double() for model in (trained, untrained))
            ka, kb = a @ a.T, b @ b.T
            cross, self_a = cross + _unbiased_hsic(ka, kb), self_a + _unbiased_hsic(ka, ka)
            self_b = self_b + _unbiased_hsic(kb, kb)
    assert float(row[1]) == pytest.approx(float(cross / (self_a * self_b).sqrt()), abs=6e-4)


def test_steer_picture_draws_the_sweep_and_its_unsteered_propensity_is_the_models(tmp_path: Path) -> None:
    printed = _run("steer_picture", tmp_path, "--out", str(tmp_path))
    _assert_picture(tmp_path / "steer_sweep.png", "PNG", (600, 250))
    unsteered = re.search(r"^\s+0\s+(-?[\d.]+)\s", printed, re.M)
    assert unsteered is not None
    torch.manual_seed(0)  # the script's model and prompts, read with a plain forward pass
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    prompts = torch.randint(1, 50, (16, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        log_p = torch.log_softmax(model(prompts).logits[:, -1].double(), dim=-1)
    assert float(unsteered[1]) == pytest.approx((log_p[:, 7] - log_p[:, 9]).mean().item(), abs=6e-5)


def test_faithfulness_picture_draws_the_curves(tmp_path: Path) -> None:
    printed = _run("faithfulness_picture", tmp_path, "--out", str(tmp_path))
    _assert_picture(tmp_path / "faithfulness.png", "PNG", (600, 250))
    lines = printed.strip().splitlines()
    assert lines[-1] == str(tmp_path / "faithfulness.png")
    rows = dict(re.findall(r"^(\w+(?: control)?)\s+([\d.]+\s+[\d.]+)$", printed, re.M))  # deletion, insertion AUCs
    assert list(rows) == ["gradcam", "layercam", "saliency", "random control", "edge control"]
    insertion = {name: float(aucs.split()[1]) for name, aucs in rows.items()}
    warned = "saliency is no better than a random map on insertion: do not trust it here" in lines
    assert warned == (insertion["saliency"] <= insertion["random control"])  # the remark says what the numbers do


def test_rollout_digits_quick_draws_eight_digits_and_their_rollout(tmp_path: Path) -> None:
    printed = _run("rollout_digits", tmp_path, "--out", str(tmp_path), "--quick")
    side, gap = 32 * 4, 4  # eight 32 px digits drawn 4x, 4 px apart; the digit above, its rollout below
    _assert_picture(tmp_path / "rollout.jpg", "JPEG", (8 * side + 7 * gap, 2 * side + gap), exact=True)
    accuracy = re.fullmatch(r"test accuracy ([\d.]+); wrote (.+)", printed.strip())
    assert accuracy is not None and accuracy[2] == str(tmp_path / "rollout.jpg")
    assert float(accuracy[1]) > 0.2  # 3 epochs: above the 0.1 of a guess, short of the full run's 0.89


def test_graph_picture_draws_resnet18s_graph_with_a_block_opened(tmp_path: Path, chromium: object) -> None:
    """``chromium`` only for its skip (or failure under CI) where there is no browser: the script opens its own."""
    printed = _run("graph_picture", tmp_path, "--out", str(tmp_path))
    _assert_picture(tmp_path / "graph.png", "PNG", (600, 400))
    modules = len(list(torchvision.models.resnet18().modules()))  # each of the 8 blocks calls its ReLU twice
    assert f"ResNet: {modules} modules in {modules + 8} calls" in printed
    assert printed.strip().splitlines()[-1] == str(tmp_path / "graph.png")


def test_inline_picture_draws_a_notebook_cell(tmp_path: Path, chromium: object) -> None:
    """``chromium`` only for its skip (or failure under CI) where there is no browser: the script opens its own."""
    printed = _run("inline_picture", tmp_path, "--out", str(tmp_path))
    _assert_picture(tmp_path / "inline.png", "PNG", (980, 200))
    assert printed.strip() == str(tmp_path / "inline.png")


def test_every_example_is_linked_from_a_guide_page_and_run_by_a_test() -> None:
    """Issue 38's point 5: a page that uses an example links it, and a test here runs it (the notebook's:
    tests/test_walkthrough.py); a new script without either fails here."""
    guide = "\n".join(page.read_text(encoding="utf-8") for page in (EXAMPLES.parent / "docs" / "guide").glob("*.md"))
    tests = Path(__file__).read_text(encoding="utf-8")
    for path in sorted([*EXAMPLES.glob("*.py"), *EXAMPLES.glob("*.ipynb")]):
        assert f"](../../examples/{path.name})" in guide, f"no page of docs/guide links {path.name}"
        if path.suffix == ".py":
            assert f'_run("{path.stem}"' in tests or f'"{path.name}"' in tests, f"no test runs {path.name}"
