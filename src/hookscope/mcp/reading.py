"""Opening what an assistant asks about, and the facts every answer keeps.

``opened(path)`` loads a store (``hookscope.load``: JSON and safetensors, nothing unpickled) and
records every warning hookscope raised while opening it; ``facts(run, heard)`` turns the state of
the store, its damage and those warnings into the sections a budget never drops. ``value_stats``
streams a tensor store batch by batch into one ``RunningStats`` per (site, kind, key), so a store
larger than memory is read in the memory of one batch.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..core.records import Label
from ..errors import HookscopeWarning
from ..stats.streaming import RunningStats
from ..store import series
from ..store.contents import damage_lines
from ..store.reader import Run, load
from .budget import Section


@contextmanager
def heard() -> Iterator[list[str]]:
    """Collect hookscope's warnings (one line each) instead of printing them; others pass through.

    Yields:
        The list the warnings' messages are appended to.
    """
    lines: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", HookscopeWarning)
        yield lines
    for w in caught:
        if issubclass(w.category, HookscopeWarning):
            lines.append(f"{w.category.__name__}: {w.message}")
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def opened(path: str) -> tuple[Run, list[str]]:
    """The store at ``path``, its shards' headers checked, and the warnings opening it raised.

    Args:
        path: a store's folder (``extract``, ``save`` or ``watch`` wrote it).

    Returns:
        ``(run, warning lines)``.

    Raises:
        StoreError: no store at ``path``, or its manifest is damaged.
    """
    with heard() as lines:
        run = load(path)
        if not series.is_watch(run.manifest):
            run.check()
    return run, lines


def kind_of(run: Run) -> str:
    """``watch store``, ``statistics store`` or ``tensor store``.

    Args:
        run: an opened store.

    Returns:
        What kind of store it is, in words.
    """
    if series.is_watch(run.manifest):
        return "watch store"
    return "statistics store" if run.statistics() else "tensor store"


def facts(run: Run, warned: list[str]) -> Section:
    """The section no budget drops: the store's kind and state, its damage, a non-finite end, warnings.

    Args:
        run: an opened store.
        warned: the warning lines ``opened`` heard.

    Returns:
        A kept ``Section`` titled ``Status``.
    """
    complete = run.manifest.get("status") == "complete"
    state = "complete" if complete else "interrupted (the run did not reach its end; what it wrote is readable)"
    lines = [f"{Path(run.path)}: a hookscope {kind_of(run)}, {state}."]
    damage = damage_lines(run) if not series.is_watch(run.manifest) else []
    lines += [f"Damaged: {line.removeprefix('damaged').strip()}" for line in damage]
    stopped = run.non_finite if series.is_watch(run.manifest) else None
    if stopped is not None:
        lines.append(
            f"The run ended on a non-finite value: step {stopped.step}, {stopped.phase}, module {stopped.module!r} "
            f"{stopped.kind} {stopped.key} ({stopped.value}): {stopped}"
        )
    absent = not_captured(run.manifest)
    lines += [f"Not captured: {line}" for line in absent]
    lines += [f"Warning: {line}" for line in warned]
    data: dict[str, Any] = {
        "path": str(run.path),
        "kind": kind_of(run),
        "complete": complete,
        "damaged": dict(run.damaged),
        "lost_batches": sorted(run.lost) if not series.is_watch(run.manifest) else [],
        "non_finite": None if stopped is None else {"step": stopped.step, "phase": stopped.phase,
                                                    "module": stopped.module, "kind": stopped.kind,
                                                    "key": stopped.key, "value": stopped.value},
        "not_captured": absent,
        "warnings": warned,
    }  # fmt: skip
    return Section("Status", "\n".join(lines), data, value=100, kept=True)


def not_captured(manifest: dict[str, Any]) -> list[str]:
    """Why something is absent, as the capture said it: per site, then per call (each reason once).

    Args:
        manifest: a store's manifest.

    Returns:
        ``site kind: reason`` lines, in store order.
    """
    lines = [f"{site['name']} {what}: {why}" for site in manifest.get("sites", []) for what, why in
             site.get("missing", {}).items()]  # fmt: skip
    for call in manifest.get("calls", []):
        lines += [f"{call['site']} call {call['call']} {what}: {why}" for what, why in call.get("missing", {}).items()]
        if call.get("error"):
            lines.append(f"{call['site']} call {call['call']} raised: {call['error']}")
    return list(dict.fromkeys(lines))


def value_stats(run: Run, sites: set[str] | None = None) -> dict[Label, RunningStats]:
    """Every (site, kind, key)'s ``RunningStats`` over the stored tensors, one batch in memory at a time.

    A statistics store gives the statistics it keeps; a watch store has none (its histories are
    its statistics).

    Args:
        run: an opened tensor or statistics store.
        sites: only these sites; None takes every site.

    Returns:
        ``(site, kind, key)`` -> its ``RunningStats``, in first-seen order.
    """
    kept = run.statistics()
    if kept:
        return {label: s for label, s in kept.items() if sites is None or label[0] in sites}
    found: dict[Label, RunningStats] = {}
    for index in run.batches:
        for site, record in run.batch(index).items():
            if sites is not None and site not in sites:
                continue
            for call in record.calls:
                for kind, keyed in call.tensors.items():
                    for key, tensor in keyed.items():
                        if tensor.is_floating_point():
                            found.setdefault((site, kind, key), RunningStats()).update(tensor.detach())
    return found
