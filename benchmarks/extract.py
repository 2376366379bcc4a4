"""hookscope.extract against a bare inference loop over the same batches, in one process, interleaved.

    .venv/bin/python benchmarks/extract.py [--rounds 5] [--batches 40] [--out DIR]

ResNet-18 (random init) at 128x128, batches of 16 made once and held in memory (data loading is
not what is measured), under no_grad. Each round runs, one after the other and always into a
fresh store: the bare loop, ``extract`` of the outputs of the eight residual blocks (15 MB a
batch), the same with ``reducers.spatial_mean()``, and ``stats_only=True, per_channel=True``;
then the durability flush: the same extract with ``flush_every=None`` (shards written only when
full) and ``flush_every=1`` (five times as often as the default ``FLUSH_EVERY``).
The table gives the median time of each, its ratio to the bare loop's median, images/s and MB/s
written. Then a separate process extracts 100 batches under ``max_memory="64MB"`` and reports its
resident memory: how much it grew over the baseline (after a warm-up batch), against the bound.
Last, a store of 100,000 small tensors: how long ``load`` takes (it reads the manifest only).

``--flush`` measures the durability flush alone: rounds of the default ``flush_every``, ``None``
and ``1`` one after the other (the order turning each round: the first run of a round is often
the slowest), and the median over rounds of each one's ratio to ``None`` in the same round.

Results go to docs/guide/stores.md by hand; the numbers depend on the machine and its disk.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torchvision
from torch import nn

from hookscope import reducers
from hookscope.store.extract import extract
from hookscope.store.reader import load

SELECT = "re:layer\\d\\.\\d"  # the eight residual blocks
BATCH, SIDE = 16, 128


def model() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18().eval()


def batches(count: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(BATCH, 3, SIDE, SIDE, generator=g) for _ in range(count)]


def bare(net: nn.Module, data: list[torch.Tensor], out: Path) -> int:
    with torch.no_grad():
        for x in data:
            net(x)
    return 0


def tensors(net: nn.Module, data: list[torch.Tensor], out: Path, **options: object) -> int:
    run = extract(net, data, out=out, select=SELECT, max_memory="256MB", progress=False, **options)  # type: ignore[arg-type]
    return sum(row.nbytes for row in run.contents())


def reduced(net: nn.Module, data: list[torch.Tensor], out: Path) -> int:
    return tensors(net, data, out, reduce=reducers.spatial_mean())


def stats_only(net: nn.Module, data: list[torch.Tensor], out: Path) -> int:
    return tensors(net, data, out, stats_only=True, per_channel=True)


def unflushed(net: nn.Module, data: list[torch.Tensor], out: Path) -> int:
    return tensors(net, data, out, flush_every=None)


def flushed_often(net: nn.Module, data: list[torch.Tensor], out: Path) -> int:
    return tensors(net, data, out, flush_every=1.0)


CASES: dict[str, Callable[[nn.Module, list[torch.Tensor], Path], int]] = {
    "bare inference loop": bare,
    "extract (8 blocks, float32)": tensors,
    "extract, spatial_mean()": reduced,
    "extract, stats_only, per_channel": stats_only,
    "extract, flush_every=None": unflushed,
    "extract, flush_every=1": flushed_often,
}


def timings(rounds: int, count: int, folder: Path) -> dict[str, tuple[float, int]]:
    """Median seconds and bytes written of every case, the cases interleaved round after round."""
    net, data = model(), batches(count)
    bare(net, data[:2], folder)  # warm-up: kernels and thread pools
    seconds: dict[str, list[float]] = {name: [] for name in CASES}
    written: dict[str, int] = {}
    for _ in range(rounds):
        for name, case in CASES.items():
            out = folder / "store"
            start = time.perf_counter()
            written[name] = case(net, data, out)
            seconds[name].append(time.perf_counter() - start)
            shutil.rmtree(out, ignore_errors=True)
    return {name: (statistics.median(times), written[name]) for name, times in seconds.items()}


def flush_cost(rounds: int, count: int, folder: Path) -> None:
    """Per round, the default flush and flush_every=1 against flush_every=None; the median ratios."""
    net, data = model(), batches(count)
    bare(net, data[:2], folder)
    cases = {"flush_every=None": unflushed, "default (FLUSH_EVERY)": tensors, "flush_every=1": flushed_often}
    ratios: dict[str, list[float]] = {name: [] for name in cases}
    shards: dict[str, int] = {}
    names = list(cases)
    for turn in range(rounds):
        seconds = {}
        for name in names[turn % 3 :] + names[: turn % 3]:  # each case first in a third of the rounds
            case = cases[name]
            out = folder / "store"
            start = time.perf_counter()
            case(net, data, out)
            seconds[name] = time.perf_counter() - start
            shards[name] = len(list((out / "shards").iterdir()))
            shutil.rmtree(out, ignore_errors=True)
        for name in cases:
            ratios[name].append(seconds[name] / seconds["flush_every=None"])
    print(f"{count} batches of {BATCH} at {SIDE}x{SIDE}, {rounds} rounds; time / time with flush_every=None:")
    for name, values in ratios.items():
        print(f"  {name:<22} median {statistics.median(values):.3f} (range {min(values):.3f}-{max(values):.3f}), "
              f"{shards[name]} shards")  # fmt: skip


def memory(count: int, folder: Path, bound: str) -> dict[str, int]:
    """In this process: resident memory growth of one extraction under ``bound``."""
    import safetensors.torch  # noqa: F401  (loaded before the baseline, like torch itself)

    net = model()
    data = batches(1)
    bare(net, data, folder)
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
    base = _status("VmRSS")

    def stream() -> object:  # made on the fly: the data set is never held
        g = torch.Generator().manual_seed(1)
        for _ in range(count):
            yield torch.randn(BATCH, 3, SIDE, SIDE, generator=g)

    run = extract(net, stream(), out=folder / "memory", select=SELECT, max_memory=bound, progress=False)
    return {"grew": _status("VmHWM") - base, "written": sum(row.nbytes for row in run.contents())}


def loading(folder: Path) -> dict[str, float]:
    """A store of 100,000 small tensors (50 layers x 2,000 batches): its manifest's size, the time
    ``load`` takes (the manifest's parse), the first access (which indexes the rows), and one batch."""
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Linear(8, 8) for _ in range(50)]).eval()
    out = folder / "many"
    extract(net, [torch.randn(4, 8) for _ in range(2000)], out=out, progress=False)
    clock = [time.perf_counter()]
    run = load(out)
    clock.append(time.perf_counter())
    run.batch(0)
    clock.append(time.perf_counter())
    torch.stack([record.output for record in run.batch(1234).values()])
    clock.append(time.perf_counter())
    seconds = [b - a for a, b in itertools.pairwise(clock)]
    return {"tensors": len(run.manifest["tensors"]), "mb": (out / "manifest.json").stat().st_size / 1e6,
            "load": seconds[0], "index": seconds[1], "batch": seconds[2]}  # fmt: skip


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--out", type=Path, help="where the stores go (default: a temporary folder)")
    parser.add_argument("--flush", action="store_true", help="measure the durability flush alone")
    parser.add_argument("--memory", metavar="BOUND", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hookscope-bench-", dir=args.out))
    try:
        if args.memory:
            print(json.dumps(memory(args.batches, folder, args.memory)))
            return
        if args.flush:
            flush_cost(args.rounds, args.batches, folder)
            return
        report(timings(args.rounds, args.batches, folder), args)
        child = [sys.executable, __file__, "--memory", "64MB", "--batches", "100", "--out", str(folder)]
        measured = json.loads(subprocess.run(child, check=True, capture_output=True, text=True).stdout)
        print(f"\nmax_memory 64 MB: {measured['written'] / 1e6:,.0f} MB written, "
              f"resident memory grew {measured['grew'] / 2**20:,.0f} MiB over the baseline")  # fmt: skip
        many = loading(folder)
        print(f"load: {many['tensors']:,} tensors, manifest {many['mb']:.1f} MB: load() {many['load']:.2f} s, "
              f"first access (indexes the rows) {many['index']:.2f} s, then one batch of 50 layers "
              f"{many['batch'] * 1000:.1f} ms")  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def report(results: dict[str, tuple[float, int]], args: argparse.Namespace) -> None:
    base = results["bare inference loop"][0]
    images = args.batches * BATCH
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.batches} batches of {BATCH} "
          f"at {SIDE}x{SIDE}, median of {args.rounds} interleaved rounds\n")  # fmt: skip
    print(f"| {'case':<34} | seconds | ratio to bare | images/s | MB written | MB/s written |")
    print(f"|{'-' * 36}|--------:|--------------:|---------:|-----------:|-------------:|")
    for name, (seconds, written) in results.items():
        print(f"| {name:<34} | {seconds:7.2f} | {seconds / base:13.2f} | {images / seconds:8.0f} | "
              f"{written / 1e6:10.1f} | {written / 1e6 / seconds:12.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
