"""The ``explain`` tool: a store read for an assistant, what stands out first, within a budget.

A tensor or statistics store: the sites holding NaN or Inf (kept), the sites whose outputs are
constant or mostly exact zeros, the widest and narrowest spreads. A watch store: the alerts by kind
and module, the first and last value of each logged scalar, the modules whose update ratio or
gradient norm left its band. Then what to ask next, then the full tables, worth least: a small budget
keeps the reading and drops the tables first.
"""

from __future__ import annotations

import math
from collections import Counter

from ..core.records import Label
from ..stats.streaming import RunningStats
from ..store import series
from ..store.reader import Run
from .budget import Section
from .reading import facts, kind_of, opened, value_stats
from .stores import statistics_of

ZEROS = 0.5  # a site whose values are more than this fraction exact zeros is called out


def explain(path: str) -> list[Section]:
    """A store explained: its status, what stands out, what to ask next, then the tables.

    Args:
        path: a store's folder (tensor, statistics or watch store).

    Returns:
        The sections of the answer, most valuable first.
    """
    run, warned = opened(path)
    parts = [facts(run, warned)]
    found = None
    if series.is_watch(run.manifest):
        parts += _watch_reading(run)
        nxt = "`alerts` lists every alert with its advice; `statistics` gives each module's histories."
    else:
        found = value_stats(run)
        parts += _value_reading(run, found)
        nxt = "`statistics` gives every site's numbers; `compare` sets this store beside another."
    parts.append(Section("What to ask next", nxt, value=30))
    tables = [s for s in statistics_of(run, None, found) if not s.kept]
    return parts + [Section(s.title, s.text, s.data, value=s.value - 30) for s in tables]


def _value_reading(run: Run, found: dict[Label, RunningStats]) -> list[Section]:
    batches = len(run.batches)
    lines = [f"{len({s for s, _, _ in found})} sites over {batches} batches ({run.rows or '?'} rows)."]
    bad = [f"{s} {k} {key}" for (s, k, key), st in found.items() if st.nan_count or st.inf_count]
    parts = []
    if bad:
        parts.append(Section("Non-finite values", "NaN or Inf in: " + ", ".join(bad), bad, value=95, kept=True))
    flat = [f"{s} {k} {key}" for (s, k, key), st in found.items() if st.count and st.std == 0]
    zeros = {f"{s} {k} {key}": st.zero_count / st.count for (s, k, key), st in found.items() if st.count}
    mostly = {name: share for name, share in zeros.items() if share > ZEROS}
    if flat:
        lines.append(f"Constant (std 0), so they carry no information: {', '.join(flat)}.")
    if mostly:
        listed = ", ".join(f"{n} ({share:.0%})" for n, share in sorted(mostly.items(), key=lambda kv: -kv[1]))
        lines.append(f"Mostly exact zeros (dead or sparse units, usually after a ReLU): {listed}.")
    spread = sorted(((st.std, f"{s} {k} {key}") for (s, k, key), st in found.items() if math.isfinite(st.std)))
    if len(spread) > 1:
        lines.append(f"Widest spread: {spread[-1][1]} (std {spread[-1][0]:.4g}); narrowest: {spread[0][1]} "
                     f"(std {spread[0][0]:.4g}).")  # fmt: skip
    data = {"constant": flat, "mostly_zeros": mostly, "kind": kind_of(run)}
    return [*parts, Section("What stands out", "\n".join(lines), data, value=90)]


def _watch_reading(run: Run) -> list[Section]:
    found = run.alerts
    by_kind = Counter(a.kind for a in found)
    lines = [f"{len(run.histories())} modules watched; {len(found)} alerts"
             + (f" ({', '.join(f'{n} {k}' for k, n in by_kind.most_common())})" if found else "") + "."]  # fmt: skip
    firsts: dict[str, str] = {}
    for a in found:
        firsts.setdefault(f"{a.kind} at {a.module}", f"from step {a.step}: {a.message}")
    lines += [f"{what} {when}" for what, when in list(firsts.items())[:8]]
    for name, pairs in run.scalars().items():
        if len(pairs) > 1:
            (s0, v0), (s1, v1) = pairs[0], pairs[-1]
            lines.append(f"{name}: {v0:.4g} at step {s0} -> {v1:.4g} at step {s1}.")
    data = {"alerts_by_kind": dict(by_kind), "first_alerts": firsts}
    return [Section("What stands out", "\n".join(lines), data, value=90)]
