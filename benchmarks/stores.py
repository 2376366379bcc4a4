"""Reading stores as an SAE trainer does: 4096-token random minibatches, in one process, interleaved.

    .venv/bin/python benchmarks/stores.py [--size-mb 256] [--rounds 3] [--out DIR]

A model of one embedding and one linear layer (d 512) runs over batches of 16 sequences of 128
tokens, and ``extract`` writes the linear layer's output to a row store (``layout="rows"``, the
default) and a token-major one (``layout="tokens"``), ``--size-mb`` of activations each; then
``export(..., format="datasets")`` writes the row store as an HF datasets folder in SAE Lens's layout
(``Array2D(128, 512)`` per sequence). Each round reads one epoch of 4096-token minibatches, the
readers one after the other (the order turning each round):

- ``hf arrow + buffer``: the exported folder (``datasets.load_from_disk``, torch format), chunks of 32
  sequences in a random order into the same shuffle buffer as below: SAE Lens's cached-activation path;
- ``rows + buffer``: ``StoreStream(rows, by="tokens", minibatch=4096)``, its shuffle buffer of 64 MB;
- ``tokens random``: ``StoreDataset(tokens, by="tokens")[4096 random indices]``: fully random tokens;
- ``rows random``: the same over the row store (one gather per batch), for reference;
- ``rows + copying buffer``: the row store through the buffer of ``hf arrow + buffer`` (concatenate,
  then index: two copies of every token, as SAE Lens's mixing buffer does), for reference.

The table gives each reader's median tokens/s and its ratio to ``rows + buffer``, and the write
rates of extract (rows, tokens) and export. Page cache: every store is read once before the clock.
Results go to docs/benchmarks.md by hand; the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn

import hookscope

BATCH, CONTEXT, D, MINIBATCH = 16, 128, 512, 4096


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(1000, D), nn.Linear(D, D)).eval()


def batches(size_mb: int) -> list[torch.Tensor]:
    count = max(size_mb * 2**20 // (BATCH * CONTEXT * D * 4), 2)
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 1000, (BATCH, CONTEXT), generator=g) for _ in range(count)]


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def hf_buffer(folder: Path) -> Callable[[], int]:
    """SAE Lens's path: contiguous chunks of sequences from Arrow, mixed in a shuffle buffer."""
    datasets = __import__("datasets")
    ds = datasets.load_from_disk(str(folder)).with_format("torch", columns=["1"])
    rows = MINIBATCH // CONTEXT

    def chunks(g: torch.Generator) -> Iterator[torch.Tensor]:
        for start in torch.randperm(len(ds) // rows, generator=g).tolist():
            yield ds[start * rows : (start + 1) * rows]["1"].reshape(-1, D)

    return lambda: sum(len(x) for x in mixed(chunks(torch.Generator().manual_seed(0))))


def mixed(chunks: Iterator[torch.Tensor], capacity: int = 64 * 2**20 // (D * 4)) -> Iterator[torch.Tensor]:
    """The shuffle buffer StoreStream uses: fill, shuffle, yield half in minibatches, keep the rest."""
    g = torch.Generator().manual_seed(0)
    held: list[torch.Tensor] = []
    count = 0
    for chunk in chunks:
        held.append(chunk)
        count += len(chunk)
        if count >= capacity:
            kept = torch.cat(held)[torch.randperm(count, generator=g)]
            half = count // 2 - (count // 2) % MINIBATCH
            yield from kept[:half].split(MINIBATCH)
            held, count = [kept[half:]], count - half
    if count:
        yield from torch.cat(held)[torch.randperm(count, generator=g)].split(MINIBATCH)


def stream(path: Path) -> Callable[[], int]:
    data = hookscope.StoreStream(path, "1", by="tokens", minibatch=MINIBATCH, max_memory="64MB")
    return lambda: sum(len(x) for x in data)


def copying(path: Path) -> Callable[[], int]:
    """The row store through SAE Lens's kind of buffer (``mixed``: concatenate, then index): two copies a token."""
    data = hookscope.StoreDataset(path, "1", by="tokens")
    column = data.columns[0]

    def chunks(g: torch.Generator) -> Iterator[torch.Tensor]:
        for position in torch.randperm(len(data.batches), generator=g).tolist():
            yield column.items(data.batches[position])

    return lambda: sum(len(x) for x in mixed(chunks(torch.Generator().manual_seed(0))))


def random(path: Path) -> Callable[[], int]:
    data = hookscope.StoreDataset(path, "1", by="tokens")
    g = torch.Generator().manual_seed(0)
    return lambda: sum(len(data[torch.randint(len(data), (MINIBATCH,), generator=g)])
                       for _ in range(len(data) // MINIBATCH))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=256, help="activations in each store (default 256)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="where the stores go (default: a temporary folder)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(dir=args.out))
    try:
        report(root, args.size_mb, args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(root: Path, size_mb: int, rounds: int) -> None:
    net, data = model(), batches(size_mb)
    __import__("datasets")  # imported before any clock, as in a trainer
    tokens = len(data) * BATCH * CONTEXT
    write = {
        "extract rows": timed(lambda: hookscope.extract(net, data, out=root / "rows", select="1", progress=False)),
        "extract tokens": timed(
            lambda: hookscope.extract(net, data, out=root / "tokens", select="1", progress=False, layout="tokens")
        ),
        "export datasets": timed(lambda: hookscope.export(root / "rows", root / "hf", format="datasets", select="1")),
    }
    readers = {"hf arrow + buffer": hf_buffer(root / "hf"), "rows + buffer": stream(root / "rows"),
               "tokens random": random(root / "tokens"), "rows random": random(root / "rows"),
               "rows + copying buffer": copying(root / "rows")}  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in readers}
    for read in readers.values():
        read()  # the page cache, and any first-use mapping
    for r in range(rounds):
        names = list(readers)[r % len(readers) :] + list(readers)[: r % len(readers)]
        for name in names:
            times[name].append(timed(readers[name]))
    print(f"{tokens:,} tokens of d {D} ({tokens * D * 4 / 2**20:.0f} MiB float32), {rounds} rounds, 1 thread\n")
    print("| writer | s | tokens/s |\n|---|---:|---:|")
    for name, seconds in write.items():
        print(f"| {name} | {seconds:.2f} | {tokens / seconds:,.0f} |")
    base = tokens / statistics.median(times["rows + buffer"])
    print("\n| reader (4096-token minibatches) | median s | tokens/s | vs rows + buffer |\n|---|---:|---:|---:|")
    for name, seconds in times.items():
        rate = tokens / statistics.median(seconds)
        print(f"| {name} | {statistics.median(seconds):.3f} | {rate:,.0f} | {rate / base:.2f}x |")


if __name__ == "__main__":
    main()
