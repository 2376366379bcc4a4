"""Timing and memory for the benchmarks: each tool interleaved with the bare model, same process.

A *case* is a bare run and a dict of tools, each a function that runs the model once and returns
what it captured. ``measure`` warms every function up, then runs rounds of bare, tool, tool, ...
(the order rotated each round, a garbage collection before every run and the result dropped
outside the clock) and reports, per tool, the median over rounds of ``tool time / bare time of
the same round``, with the lowest and highest round. Interleaving cancels the slow drift of a
shared machine; the ratio is what the docs and the targets quote. ``HOOKSCOPE_BENCH_CLOCK=cpu``
times with the process's CPU time instead of the wall clock: on a machine other jobs share, with
``torch.set_num_threads(1)``, it does not count the time the process waited for a core.

Peak memory is the peak of torch's own allocation counter during one run (``torch.profiler`` with
``profile_memory=True``), relative to the start of the run: tensor bytes, exact, with no noise from
the C allocator or Python objects. On a GPU, ``torch.cuda.max_memory_allocated`` (see gpu.py).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

Run = Callable[[], Any]
CLOCK = time.process_time if os.environ.get("HOOKSCOPE_BENCH_CLOCK") == "cpu" else time.perf_counter


@dataclass
class Case:
    """A benchmark case: the bare run, and a factory per tool (built outside the clock)."""

    title: str
    bare: Run
    tools: dict[str, Callable[[], Run]]
    rounds: int
    unpack: Callable[[str, Any], Any] | None = None
    check: Callable[[str, Any], str] | None = None

    def run(self, only: Iterable[str] | None = None, *, rounds: int | None = None, memory: bool = True) -> list[Row]:
        """Measure bare and the tools named in ``only`` (all by default) in this process."""
        chosen = {name: _build(self.tools[name]) for name in (self.tools if only is None else only)}
        return measure(
            self.title,
            self.bare,
            chosen,
            rounds=rounds or self.rounds,
            unpack=self.unpack,
            check=self.check,
            memory=memory,
        )


def _build(factory: Callable[[], Run]) -> Run:
    """The tool's run function; a peer that cannot be built here becomes a run that raises why."""
    try:
        return factory()
    except Exception as err:
        failure = err

        def fail() -> Any:
            raise failure

        return fail


@dataclass
class Row:
    """One tool in one case: times, ratio to bare, memory, and what was captured."""

    case: str
    tool: str
    ms: float = float("nan")  # median milliseconds per run
    ratio: float = float("nan")  # median of per-round tool/bare
    low: float = float("nan")
    high: float = float("nan")
    peak_mb: float | None = None  # peak tensor memory of one run, MB
    captured_mb: float | None = None  # distinct bytes the tool kept, MB
    tensors: int | None = None  # tensors the tool handed back
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor inside nested dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors_in(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from tensors_in(v)


def captured_bytes(tensors: Iterable[torch.Tensor]) -> tuple[int, int]:
    """(distinct bytes, tensor count): a storage shared by several tensors counts once."""
    seen: dict[tuple[str, int], int] = {}
    count = 0
    for t in tensors:
        count += 1
        if t.device.type == "meta":
            continue
        storage = t.untyped_storage()
        seen[(str(t.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values()), count


def measure(
    case: str,
    bare: Run,
    tools: dict[str, Run],
    *,
    rounds: int,
    warmup: int = 2,
    unpack: Callable[[str, Any], Any] | None = None,
    check: Callable[[str, Any], str] | None = None,
    memory: bool = True,
    peak: Callable[[Run], float | None] | None = None,
) -> list[Row]:
    """Rows for ``bare`` and every tool of ``tools`` (see the module docstring).

    ``peak(run)`` measures a run's peak memory in MB (default: ``peak_mb``, torch's CPU counter).

    ``unpack(tool, result)`` turns a tool's result into nested tensors (for the kept bytes);
    ``check(tool, result)`` returns a note on what the tool kept (e.g. values rewritten in place).
    """
    rows = {name: Row(case, name) for name in ("bare", *tools)}
    runs: dict[str, Run] = {"bare": bare}
    for name, tool in tools.items():
        try:
            out = tool()  # the first run also checks that the tool works here
        except Exception as err:  # a peer that fails is a row that says why, not a crash
            rows[name].note = _failure(err)
            continue
        held = unpack(name, out) if unpack is not None else out
        if held is not None:
            rows[name].captured_mb, rows[name].tensors = _mb_and_count(held)
        if check is not None:
            rows[name].note = check(name, out)
        del out, held
        runs[name] = tool
    try:
        times = _interleave(runs, rounds, warmup)
    except _Failed as failed:  # a tool that works once and then fails: the row says why
        rows[failed.tool].note = failed.note
        del runs[failed.tool]
        times = _interleave(runs, rounds, warmup)
    bare_ms = statistics.median(times["bare"]) * 1e3
    for name, ts in times.items():
        ratios = [t / b for t, b in zip(ts, times["bare"], strict=True)]
        row = rows[name]
        row.ms = statistics.median(ts) * 1e3
        row.extra["bare_ms"] = bare_ms
        row.ratio, row.low, row.high = statistics.median(ratios), min(ratios), max(ratios)
        if memory:
            row.peak_mb = (peak or peak_mb)(runs[name])
    for row in rows.values():
        if rows["bare"].peak_mb is not None:
            row.extra["bare_peak_mb"] = rows["bare"].peak_mb
    return list(rows.values())


class _Failed(Exception):
    def __init__(self, tool: str, err: Exception) -> None:
        super().__init__(tool)
        self.tool = tool
        self.note = _failure(err)


def _failure(err: Exception) -> str:
    return f"failed: {type(err).__name__}: {(str(err).splitlines() or [''])[0][:120]}"


def _interleave(runs: dict[str, Run], rounds: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per run: warm-up, then rounds of every run, the order rotated each round."""
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            _call(runs, name)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            start = CLOCK()
            out = _call(runs, name)
            times[name].append(CLOCK() - start)
            del out  # freed outside the clock, for every tool alike
    return times


def _call(runs: dict[str, Run], name: str) -> Any:
    try:
        return runs[name]()
    except Exception as err:
        if name == "bare":
            raise
        raise _Failed(name, err) from err


def _mb_and_count(held: Any) -> tuple[float, int]:
    nbytes, count = captured_bytes(tensors_in(held))
    return nbytes / 1e6, count


def peak_mb(run: Run) -> float | None:
    """Peak tensor memory of one run of ``run``, in MB above what was allocated before it."""
    gc.collect()
    with warnings.catch_warnings(), _quiet_stderr():
        warnings.simplefilter("ignore")
        activities = [torch.profiler.ProfilerActivity.CPU]
        with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
            out = run()
        del out
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f)["traceEvents"]
    memory = [e["args"] for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type", 0) == 0]
    if not memory:
        return None
    start = memory[0]["Total Allocated"] - memory[0]["Bytes"]
    return (max(m["Total Allocated"] for m in memory) - start) / 1e6


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Kineto prints start/stop lines (and a GPU probe error on CPU builds) on fd 2; hide them."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def table(rows: list[Row]) -> str:
    """A Markdown table of rows, one section per case.

    ``peak/(bare+kept)`` divides a tool's peak by the bare run's peak plus what the tool kept:
    1.00 means nothing was allocated beyond the kept copies (the memory target is 1.10 at most).
    """
    lines: list[str] = []
    case = None
    for r in rows:
        if r.case != case:
            case = r.case
            lines += ["", f"**{case}**", "", HEADER, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        lines.append("| " + " | ".join(_cells(r)) + " |")
    return "\n".join(lines).strip() + "\n"


HEADER = "| tool | ms | bare ms | ratio to bare | min-max | peak MB | kept MB | peak/(bare+kept) | tensors | note |"


def _cells(r: Row) -> list[str]:
    bare_peak = r.extra.get("bare_peak_mb")
    budget = None
    if r.peak_mb is not None and bare_peak is not None and r.captured_mb is not None and r.tool != "bare":
        budget = r.peak_mb / (bare_peak + r.captured_mb) if bare_peak + r.captured_mb > 0 else None
    return [
        r.tool,
        _num(r.ms, 1),
        _num(r.extra.get("bare_ms"), 1),
        "—" if r.ratio != r.ratio else f"{r.ratio:.3f}x",
        "—" if r.low != r.low else f"{r.low:.2f}-{r.high:.2f}",
        _num(r.peak_mb, 1),
        _num(r.captured_mb, 1),
        _num(budget, 2),
        "" if r.tensors is None else str(r.tensors),
        r.note,
    ]


def _num(value: float | None, digits: int) -> str:
    return "—" if value is None or value != value else f"{value:.{digits}f}"


def save(rows: list[Row], path: str) -> None:
    """Append rows as JSON lines to ``path``."""
    with open(path, "a") as f:
        for row in rows:
            f.write(json.dumps(asdict(row)) + "\n")


def load(path: str) -> list[Row]:
    with open(path) as f:
        return [Row(**json.loads(line)) for line in f if line.strip()]
