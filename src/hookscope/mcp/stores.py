"""The tools over one store: ``info``, ``sites``, ``statistics``, ``alerts``.

Each answers in sections (``budget.Section``): the store's status first and kept (``reading.facts``),
then what was asked, tables split so their head survives a budget. A watch store's statistics are
its histories (the first, last, lowest and highest value of each column per module); a statistics
store's are the ones it keeps; a tensor store's are computed one batch at a time.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any

from ..core.records import Label
from ..evidence.bundle import is_bundle
from ..stats.streaming import RunningStats
from ..store import series
from ..store.reader import Run
from .budget import Section, compact, table_sections
from .evidence_reading import bundle
from .reading import facts, kind_of, opened, value_stats

WATCHED = ("grad_norm", "update_ratio", "weight_norm", "dead", "act_std", "grad_output_norm")


def info(path: str) -> list[Section]:
    """What a store is: status, provenance, how it was made, and a table of what it holds (a bundle: ``bundle``).

    Args:
        path: the store's (or evidence bundle's) folder.

    Returns:
        The sections of the answer.
    """
    if is_bundle(path):
        return bundle(path)
    run, warned = opened(path)
    parts = [
        facts(run, warned),
        Section("Provenance", compact(run.provenance), run.provenance, value=60),
        Section("How it was made", compact(run.config), run.config, value=55),
    ]
    if series.is_watch(run.manifest):
        found = run.alerts
        lines = [str(a) for a in found[:20]] or ["no alert fired"]
        parts.append(Section("Alerts", "\n".join(lines), [a.__dict__ for a in found[:20]], value=80))
        parts.append(_scalars(run))
    return parts + _site_table(run, None)


def sites(path: str, select: str | None = None) -> list[Section]:
    """The sites a store holds: each module's type, kinds, keys, first shape, dtype and how many tensors.

    Args:
        path: the store's folder.
        select: a glob over site names (``layer*``); None takes every site.

    Returns:
        The sections of the answer.
    """
    run, warned = opened(path)
    return [facts(run, warned), *_site_table(run, select)]


def statistics(path: str, site: str | None = None) -> list[Section]:
    """Each site's values: count, mean, std, min, max and non-finite counts (a watch store: its histories).

    Args:
        path: the store's folder.
        site: a glob over site names; None takes every site.

    Returns:
        The sections of the answer; sites holding NaN or Inf are a kept section of their own.
    """
    run, warned = opened(path)
    return [facts(run, warned), *statistics_of(run, site)]


def statistics_of(run: Run, site: str | None = None, found: dict[Label, RunningStats] | None = None) -> list[Section]:
    """The sections of ``statistics`` for an opened store, its status aside.

    Args:
        run: an opened store.
        site: a glob over site names; None takes every site.
        found: the values' statistics when already computed (``reading.value_stats``).

    Returns:
        A kept section of the sites holding NaN or Inf (if any), then the table.
    """
    if series.is_watch(run.manifest):
        return _history_sections(run, site)
    if found is None:
        found = value_stats(run, {name for name in run if _picked(name, site)} if site else None)
    header = ["site", "kind", "key", "values", "mean", "std", "min", "max", "nan", "inf", "zeros"]
    rows = [
        [name, kind, key, str(s.count), *(_num(v) for v in (s.mean, s.std, s.min, s.max)),
         str(s.nan_count), str(s.inf_count), f"{s.zero_count / max(s.count, 1):.3f}"]
        for (name, kind, key), s in found.items()
    ]  # fmt: skip
    bad = [r for r in rows if r[8] != "0" or r[9] != "0"]
    parts = []
    if bad:
        lines = [f"{r[0]} {r[1]} {r[2]}: {r[8]} NaN, {r[9]} Inf of {r[3]} values" for r in bad]
        parts.append(Section("Non-finite values", "\n".join(lines), bad, value=95, kept=True))
    return parts + table_sections("Statistics", header, rows, value=50)


def alerts(path: str) -> list[Section]:
    """A watch store's alerts (module, kind, step, value, bound, advice), the thresholds, and a non-finite end.

    Args:
        path: a watch store's folder.

    Returns:
        The sections of the answer (a store of another kind says it holds no alerts).
    """
    run, warned = opened(path)
    if not series.is_watch(run.manifest):
        return [facts(run, warned), Section("Alerts", f"a {kind_of(run)} keeps no alerts; `watch` writes them")]
    found = run.alerts
    header = ["step", "module", "kind", "column", "value", "bound", "advice"]
    rows = [[str(a.step), a.module, a.kind, a.column, _num(a.value), _num(a.bound), a.message] for a in found]
    limits = run.config.get("thresholds", {})
    parts = [facts(run, warned)]
    if not rows:
        parts.append(Section("Alerts (0)", "no alert fired", [], value=80))
    parts += table_sections(f"Alerts ({len(rows)})", header, rows, value=80) if rows else []
    parts.append(Section("Thresholds", compact(limits), limits, value=40))
    return parts


def _site_table(run: Run, select: str | None) -> list[Section]:
    if series.is_watch(run.manifest):
        header = ["site", "type", "logged steps", "first step", "last step"]
        rows = [
            [name, h.type, str(len(h)), str(h.steps[0]) if len(h) else "-", str(h.steps[-1]) if len(h) else "-"]
            for name, h in run.histories().items()
            if _picked(name, select)
        ]
    else:
        header = ["site", "type", "kind", "key", "shape", "dtype", "tensors"]
        rows = [
            [c.site, c.type, c.kind, c.key, str(list(c.shape)), c.dtype, str(c.tensors)]
            for c in run.contents()
            if _picked(c.site, select)
        ]
    return [*table_sections(f"Sites ({len(rows)})", header, rows, value=50)]


def _history_sections(run: Run, site: str | None) -> list[Section]:
    header = ["site", "column", "first", "last", "lowest", "highest", "undefined steps", "steps not measured"]
    rows: list[list[str]] = []
    for name, h in run.histories().items():
        if not _picked(name, site) or not len(h):
            continue
        for column in WATCHED:
            values = h[column]
            finite = [v for v in values if math.isfinite(v)]
            spread = [_num(min(finite)), _num(max(finite))] if finite else ["-", "-"]
            undefined = len(h.undefined.get(column, ()))  # a ratio over zero weights; other NaN: not measured
            missing = sum(not math.isfinite(v) for v in values) - undefined
            ends = [h.cell(column, h.steps[0], values[0]), h.cell(column, h.steps[-1], values[-1])]
            rows.append([name, column, *ends, *spread, str(undefined), str(missing)])
    return [*table_sections("Histories", header, rows, value=50, first=30), _scalars(run)]


def _scalars(run: Run) -> Section:
    found = run.scalars()
    data: dict[str, Any] = {
        name: {"count": len(pairs), "first": list(pairs[0]), "last": list(pairs[-1])}
        for name, pairs in found.items()
        if pairs
    }
    lines = [
        f"{name}: {d['count']} values, step {d['first'][0]} = {_num(d['first'][1])} ... "
        f"step {d['last'][0]} = {_num(d['last'][1])}"
        for name, d in data.items()
    ]
    return Section("Scalars", "\n".join(lines) or "no scalar was logged (`w.log(loss=...)` logs them)", data, 45)


def _picked(name: str, pattern: str | None) -> bool:
    return pattern is None or fnmatch.fnmatchcase(name, pattern)


def _num(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)
