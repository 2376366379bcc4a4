"""The token stream that feeds an SAE trainer: 4096-token shuffled minibatches, in one process, interleaved.

    .venv/bin/python benchmarks/stores.py [--size-mb 256] [--rounds 5] [--shard-mb N] [--out DIR]
    .venv/bin/python benchmarks/stores.py --smoke     # a 32 MiB store of 6 MiB shards, in seconds (CI runs it)

A model of one embedding and one linear layer (d 512) runs over batches of 16 sequences of 128
tokens, and ``extract`` writes the linear layer's output to a row store (``layout="rows"``, the
default) and a token-major one (``layout="tokens"``), ``--size-mb`` of activations each; then
``export(..., format="datasets")`` writes the row store as an HF datasets folder in SAE Lens's layout
(``Array2D(128, 512)`` per sequence). Each round reads one epoch of 4096-token minibatches with
every reader, one after the other (the order turning each round):

- ``hf arrow, shuffled``: the exported folder, ``load_from_disk(...).shuffle(seed=epoch)
  .with_format("torch")``, 32 sequences (4096 tokens) at a time: shuffled by sequence;
- ``sae lens: in order + mixing buffer``: SAE Lens's own read of a cached-activations folder
  (``ActivationsStore._load_raw_llm_batch_from_cached``: 32 sequences at a time, in order) through its
  ``mixing_buffer`` (64 MB of tokens, ``mix_fraction=0.5``), the function loaded from SAE Lens's installed
  file (importing the package takes seconds and nothing else is used);
- ``StoreStream, row store`` and ``StoreStream, token store``: ``StoreStream(path, by="tokens",
  minibatch=4096, max_memory="64MB", seed=0)`` with ``set_epoch(epoch)``: shuffled by token;
- ``StoreDataset[4096 random indices], token store``: uniformly random tokens, for reference.

Every reader is run once before the clock (the page cache, each file's mapping). Each round's
ratio is the two readers' times in that round; the table gives the medians of the rates and the
range of the ratios over the rounds, in wall time and in CPU time (user + system of this process:
what a shared machine's other jobs take is left out). Results go to docs/benchmarks.md by hand.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

import hookscope

BATCH, CONTEXT, D, MINIBATCH, WINDOW = 16, 128, 512, 4096, 64 * 2**20
SMOKE_MB, SMOKE_SHARD_MB = 32, 6
# benchmarks/smoke.py fails below this: the stream measured 9.2-10.9x the Arrow path at SMOKE_MB in SMOKE_SHARD_MB
# shards (CPU time, the 2-core machine under load 14-16), 1.6-1.8x before the files were mapped as one (round 12).
# The Arrow path's own rate moves a lot between processes (447k-739k tokens/s, idle machine): alone the ratio
# was 6.7-10.7x, inside the full test suite once 3.79x. 2.5x fails the old path and a regression to it, not
# that spread.
FLOOR = 2.5
STREAM, ARROW, SAE = "StoreStream, row store", "hf arrow, shuffled", "sae lens: in order + mixing buffer"


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(1000, D), nn.Linear(D, D)).eval()


def batches(size_mb: int) -> list[torch.Tensor]:
    count = max(size_mb * 2**20 // (BATCH * CONTEXT * D * 4), 2)
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 1000, (BATCH, CONTEXT), generator=g) for _ in range(count)]


def arrow(folder: Path) -> Callable[[int], int]:
    """The export through HF datasets: shuffled by sequence, torch format, 32 sequences a minibatch."""
    loaded = __import__("datasets").load_from_disk(str(folder))
    rows = MINIBATCH // CONTEXT

    def epoch(seed: int) -> int:
        ds = loaded.shuffle(seed=seed).with_format("torch", columns=["1"])
        return sum(len(ds[i : i + rows]["1"].reshape(-1, D)) for i in range(0, len(ds), rows))

    return epoch


def sae_lens(folder: Path) -> Callable[[int], int] | None:
    """SAE Lens's read of cached activations: in order, 32 sequences at a time, through its mixing buffer."""
    spec = importlib.util.find_spec("sae_lens")
    if spec is None or spec.origin is None:
        return None
    file = Path(spec.origin).parent / "training" / "mixing_buffer.py"
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location("sae_mixing", file))  # type: ignore[arg-type]
    module.__spec__.loader.exec_module(module)  # type: ignore[union-attr]
    ds = __import__("datasets").load_from_disk(str(folder))
    ds.set_format(type="torch", columns=["1"])
    rows = MINIBATCH // CONTEXT

    def loaded() -> Iterator[torch.Tensor]:
        for start in range(0, len(ds) - rows + 1, rows):
            yield ds[start : start + rows]["1"].reshape(rows * CONTEXT, D)

    def epoch(seed: int) -> int:
        torch.manual_seed(seed)  # its randperm draws from the global generator
        return sum(len(x) for x in module.mixing_buffer(WINDOW // (D * 4), MINIBATCH, loaded(), 0.5))

    return epoch


def stream(path: Path) -> Callable[[int], int]:
    data = hookscope.StoreStream(path, "1", by="tokens", minibatch=MINIBATCH, max_memory=WINDOW, seed=0)

    def epoch(seed: int) -> int:
        data.set_epoch(seed)
        return sum(len(x) for x in data)

    return epoch


def random(path: Path) -> Callable[[int], int]:
    data = hookscope.StoreDataset(path, "1", by="tokens")

    def epoch(seed: int) -> int:
        g = torch.Generator().manual_seed(seed)
        return sum(len(data[torch.randint(len(data), (MINIBATCH,), generator=g)])
                   for _ in range(len(data) // MINIBATCH))  # fmt: skip

    return epoch


def write(root: Path, size_mb: int, *, tokens: bool = True, shard_mb: int | None = None) -> dict[str, float]:
    """The row store, its export and (``tokens``) the token store; the seconds each writer took. ``shard_mb``:
    the stores' shard files' size (default ``extract``'s)."""
    net, data = model(), batches(size_mb)
    shards = {} if shard_mb is None else {"shard_size": shard_mb * 2**20}
    work = {
        "extract rows": lambda: hookscope.extract(net, data, out=root / "rows", select="1", progress=False, **shards),
        "export datasets": lambda: hookscope.export(root / "rows", root / "hf", format="datasets", select="1"),
        "extract tokens": lambda: hookscope.extract(
            net, data, out=root / "tokens", select="1", progress=False, layout="tokens", **shards
        ),
    }
    took = {}
    for name in list(work)[: 3 if tokens else 2]:
        start = time.perf_counter()
        work[name]()
        took[name] = time.perf_counter() - start
    return took


def readers(root: Path, *, smoke: bool = False) -> dict[str, Callable[[int], int]]:
    found = {ARROW: arrow(root / "hf"), STREAM: stream(root / "rows")}
    if smoke:
        return found
    sae = sae_lens(root / "hf")
    found.update({SAE: sae} if sae is not None else {})
    found.update({"StoreStream, token store": stream(root / "tokens"),
                  "StoreDataset[4096 random indices], token store": random(root / "tokens")})  # fmt: skip
    return found


def measure(read: dict[str, Callable[[int], int]], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Each reader's seconds per epoch, ``wall`` and ``cpu``, over ``rounds`` interleaved rounds."""
    times: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in read}
    tokens = {name: epoch(0) for name, epoch in read.items()}  # the page cache, the mappings
    if len(set(tokens.values())) != 1:
        raise SystemExit(f"the readers read different numbers of tokens: {tokens}")
    for r in range(rounds):
        names = list(read)[r % len(read) :] + list(read)[: r % len(read)]
        for name in names:
            wall, cpu = time.perf_counter(), time.process_time()
            read[name](r + 1)
            times[name]["wall"].append(time.perf_counter() - wall)
            times[name]["cpu"].append(time.process_time() - cpu)
    return times


def rows(times: dict[str, dict[str, list[float]]], tokens: int) -> list[dict[str, Any]]:
    """One row per reader: median tokens/s, and its per-round ratio to the Arrow path and to SAE Lens's read."""
    found = []
    for name, clocks in times.items():
        row: dict[str, Any] = {"reader": name, "tokens": tokens}
        for clock, seconds in clocks.items():
            row[f"{clock}_rate"] = tokens / statistics.median(seconds)
            for base, label in ((ARROW, "arrow"), (SAE, "sae")):
                if base in times:
                    ratios = [b / s for b, s in zip(times[base][clock], seconds, strict=True)]
                    row[f"{clock}_vs_{label}"] = [statistics.median(ratios), min(ratios), max(ratios)]
        found.append(row)
    return found


def table(found: list[dict[str, Any]]) -> str:
    head = ("| reader (4096-token minibatches) | tokens/s (wall) | vs Arrow (range) | vs SAE Lens (range) "
            "| tokens/s (CPU) | vs Arrow, CPU (range) | vs SAE Lens, CPU (range) |")  # fmt: skip

    def ratio(row: dict[str, Any], key: str) -> str:
        return "{:.2f}x ({:.2f}-{:.2f})".format(*row[key]) if key in row else "—"

    lines = [head, "|---|" + "---:|" * 6]
    for row in found:
        wall, cpu = (f"| {row[c + '_rate']:,.0f} | {ratio(row, c + '_vs_arrow')} | {ratio(row, c + '_vs_sae')} "
                     for c in ("wall", "cpu"))  # fmt: skip
        lines.append(f"| {row['reader']} {wall}{cpu}|")
    return "\n".join(lines)


def smoke(root: Path, rounds: int = 5, size_mb: int = SMOKE_MB) -> list[dict[str, Any]]:
    """The stream against the Arrow path over a small store of ``SMOKE_SHARD_MB`` shards (every minibatch drawn
    across files): rows for ``benchmarks/smoke.py`` and CI."""
    write(root, size_mb, tokens=False, shard_mb=SMOKE_SHARD_MB)
    read = readers(root, smoke=True)
    return rows(measure(read, rounds), len(hookscope.StoreDataset(root / "rows", "1", by="tokens")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=None, help="activations in each store (default 256; --smoke 32)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="a 32 MiB store, the stream and the Arrow path only")
    parser.add_argument("--shard-mb", type=int, default=None, help="the stores' shard size (default extract's)")
    parser.add_argument("--out", type=Path, default=None, help="where the stores go (default: a temporary folder)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(dir=args.out))
    try:
        if args.smoke:
            found = smoke(root, args.rounds, args.size_mb or SMOKE_MB)
        else:
            written = write(root, args.size_mb or 256, shard_mb=args.shard_mb)
            tokens = len(hookscope.StoreDataset(root / "rows", "1", by="tokens"))
            found = rows(measure(readers(root), args.rounds), tokens)
            print(f"{tokens:,} tokens of d {D} ({tokens * D * 4 / 2**20:.0f} MiB float32), {args.rounds} rounds, "
                  f"1 thread, load average {os.getloadavg()[0]:.1f}\n")  # fmt: skip
            print("| writer | s | tokens/s |\n|---|---:|---:|")
            print("\n".join(f"| {name} | {s:.2f} | {tokens / s:,.0f} |" for name, s in written.items()) + "\n")
        print(table(found))
        for row in found:
            print("STREAM " + json.dumps(row))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
