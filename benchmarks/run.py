"""Run the full benchmark: every case, every tool, each tool in a fresh process beside the bare model.

    bash benchmarks/run.sh                 # makes benchmarks/.venv with the pinned peers, then this
    benchmarks/.venv/bin/python benchmarks/run.py --only "ResNet-18 every leaf"

A tool runs in its own process, interleaved with the bare model (A B A B ...): peers that patch
torch globally (TorchLens wraps torch functions, nnsight patches ``Tensor.backward``) cannot
slow down the bare runs or the other tools. Results go to ``benchmarks/results/`` as JSON lines
and a Markdown table (``latest.md``), with the machine and the versions.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402

THREADS = 2  # the machine's cores; percall uses 1
# glibc told to keep freed memory instead of handing it back to the kernel: a kept copy then lands in
# pages that are already mapped, instead of new ones the kernel must fault in and zero (see docs).
KEEP_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(2**30), "MALLOC_TRIM_THRESHOLD_": str(2**40)}
PEERS = (
    "torch",
    "torchvision",
    "torchlens",
    "nnsight",
    "transformer-lens",
    "grad-cam",
    "torchcam",
    "captum",
    "transformers",
    "hookscope",
)


def cases() -> dict[str, Callable[[], harness.Case]]:
    """Every case by key, built lazily (a case builds its model)."""
    import loop

    import gpt
    import gradcam
    import percall
    import vision

    table: dict[str, Callable[[], harness.Case]] = {}
    for batch in (1, 8, 32):
        table[f"leaves-b{batch}"] = lambda b=batch: vision.leaves(b)
    for batch in (1, 8, 32):
        table[f"layers-b{batch}"] = lambda b=batch: vision.layers(b)
    table["leaves-b8-keepmem"] = lambda: _keepmem(vision.leaves(8))
    table["loop-b8"] = lambda: loop.loop(8)
    table["convs-b8"] = lambda: vision.convs(8)
    table["gradcam-efficientnet"] = lambda: gradcam.grad_cam("EfficientNet-Lite0")
    table["gradcam-resnet"] = lambda: gradcam.grad_cam("ResNet-18")
    table["scorecam-efficientnet"] = lambda: gradcam.score_cam("EfficientNet-Lite0")
    table["gpt-transformer-lens"] = gpt.transformer_lens_case
    table["gpt-hf"] = gpt.gpt2_case
    table["percall"] = percall.per_call
    return table


def _keepmem(case: harness.Case) -> harness.Case:
    """The case with hookscope and hand-written hooks only, run under KEEP_MEMORY (set by the parent)."""
    case.title += ", glibc keeps freed memory"
    case.tools = {k: v for k, v in case.tools.items() if k in ("hookscope", "hand-written clone hooks")}
    return case


def child(key: str, tool: str, out: str, rounds: int | None) -> None:
    """Measure one tool of one case in this process and append its rows to ``out``."""
    torch.set_num_threads(1 if key == "percall" else THREADS)
    case = cases()[key]()
    rows = case.run([tool], rounds=rounds, memory=key != "percall")
    if key == "percall":
        import percall

        rows = percall.notes(rows)
    for row in rows:
        row.extra["key"] = key
    harness.save(rows, out)


def parent(keys: list[str], out_dir: str, rounds: int | None, timeout: int) -> str:
    os.makedirs(out_dir, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    jsonl = os.path.join(out_dir, f"{stamp}.jsonl")
    table = cases()
    for key in keys:
        tools = list(table[key]().tools)
        for tool in tools:
            started = time.perf_counter()
            command = [sys.executable, __file__, "--child", key, tool, "--out", jsonl]
            if rounds:
                command += ["--rounds", str(rounds)]
            try:
                env = os.environ | KEEP_MEMORY if key.endswith("-keepmem") else None
                subprocess.run(command, check=True, timeout=timeout, env=env)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
                failed = harness.Row(key, tool, note=f"failed: {type(err).__name__}")
                failed.extra["key"] = key
                harness.save([failed], jsonl)
            print(f"{key:24s} {tool:45s} {time.perf_counter() - started:6.1f} s", flush=True)
    return write_table(jsonl, os.path.join(out_dir, "latest.md"))


def write_table(jsonl: str, path: str) -> str:
    """One bare row per case (from its first process) and every tool row, as Markdown."""
    rows, seen = [], set()
    for row in harness.load(jsonl):
        if row.tool == "bare":
            if row.case in seen:
                continue
            seen.add(row.case)
        rows.append(row)
    text = machine() + "\n" + harness.table(rows)
    with open(path, "w") as f:
        f.write(text)
    return text


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    versions = [f"{name} {_version(name)}" for name in PEERS]
    return (
        f"Machine: {cpu}, {os.cpu_count()} logical CPUs, torch threads {THREADS} (percall: 1), "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}.\n\n"
        f"Versions: {', '.join(versions)}.\n"
    )


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", default=[], help="run the cases whose key contains this")
    parser.add_argument("--rounds", type=int, help="rounds per case (default: each case's own)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="results folder (child: JSONL file)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per tool process")
    parser.add_argument("--list", action="store_true", help="list the case keys and exit")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "TOOL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.out, args.rounds)
        return 0
    keys = [k for k in cases() if not args.only or any(o in k for o in args.only)]
    if args.list:
        print("\n".join(keys))
        return 0
    print(parent(keys, args.out, args.rounds, args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
