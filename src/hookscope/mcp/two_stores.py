"""The ``compare`` tool: two stores side by side.

What each was made from (model, weights, kinds), the sites only one holds (kept: an answer never
hides what could not be compared), each shared (site, kind, key)'s mean and std in both and how far
they moved, and, for two tensor stores of the same batches, the linear CKA of each shared site with
itself (``hookscope.compare.cka``: 1.0 is the same representation up to rotation and scale).
"""

from __future__ import annotations

from ..compare.similarity import cka
from ..errors import HookscopeError
from ..store import series
from ..store.reader import Run
from .budget import Section, table_sections
from .reading import facts, kind_of, opened, value_stats

MADE_OF = ("model", "model_module", "parameters", "weights_sha256")


def compare(path_a: str, path_b: str, similarity: bool = True) -> list[Section]:
    """Two stores side by side: provenance, sites only in one, statistics of the shared ones, CKA per site.

    Args:
        path_a: the first store's folder (A).
        path_b: the second store's folder (B).
        similarity: compute each shared site's linear CKA (two tensor stores of the same batches only).

    Returns:
        The sections of the answer.
    """
    (a, warned_a), (b, warned_b) = opened(path_a), opened(path_b)
    parts = [_renamed(facts(a, warned_a), "Status of A"), _renamed(facts(b, warned_b), "Status of B")]
    made = {key: [a.provenance.get(key), b.provenance.get(key)] for key in MADE_OF}
    same = [key for key, (x, y) in made.items() if x == y]
    text = "\n".join(f"{key}: {x} | {y}" for key, (x, y) in made.items() if key not in same)
    parts.append(Section("Made from", (text + "\n" if text else "") + f"the same: {', '.join(same) or 'nothing'}",
                         made, value=70))  # fmt: skip
    sites_a, sites_b = _sites(a), _sites(b)
    only = {
        "only in A": [s for s in _order(a) if s not in sites_b],
        "only in B": [s for s in _order(b) if s not in sites_a],
    }
    if any(only.values()):
        lines = [f"{side}: {', '.join(names)}" for side, names in only.items() if names]
        parts.append(Section("Not compared", "\n".join(lines), only, value=90, kept=True))
    shared = sites_a & sites_b
    if not shared:
        return parts  # "Not compared" says it: no site of one is a site of the other
    parts += _moved(a, b, shared)
    if similarity and shared:
        parts.append(_cka(a, b, [s for s in _order(a) if s in shared]))
    return parts


def _moved(a: Run, b: Run, shared: set[str]) -> list[Section]:
    if series.is_watch(a.manifest) or series.is_watch(b.manifest):
        return [Section("Statistics", "watch stores are compared by their histories: ask `statistics` of each")]
    stats_a, stats_b = value_stats(a, shared), value_stats(b, shared)
    header = ["site", "kind", "key", "mean A", "mean B", "std A", "std B", "|mean moved| / std A"]
    rows = []
    for label in [label for label in stats_a if label in stats_b]:
        x, y = stats_a[label], stats_b[label]
        moved = abs(y.mean - x.mean) / x.std if x.std > 0 else float("inf") if y.mean != x.mean else 0.0
        rows.append([*label, *(f"{v:.4g}" for v in (x.mean, y.mean, x.std, y.std, moved))])
    rows.sort(key=lambda r: -float(r[-1]) if r[-1] != "nan" else 0.0)
    return table_sections("Statistics, most moved first", header, rows, value=60)


def _cka(a: Run, b: Run, names: list[str]) -> Section:
    if kind_of(a) != "tensor store" or kind_of(b) != "tensor store":
        why = f"CKA needs the tensors of both: A is a {kind_of(a)}, B a {kind_of(b)}"
        return Section("CKA not computed", why, {"why": why}, value=85, kept=True)
    try:
        sim = cka(a, b, select=names)
    except HookscopeError as err:
        return Section("CKA not computed", str(err), {"why": str(err)}, value=85, kept=True)
    diagonal = sim.diagonal()
    rows = [[unit, f"{value:.4f}"] for unit, value in sorted(diagonal.items(), key=lambda kv: kv[1])]
    title = f"CKA of each shared site, lowest first ({sim.samples} inputs)"
    return table_sections(title, ["unit", "cka"], rows, value=65, first=len(rows))[0]


def _renamed(section: Section, title: str) -> Section:
    return Section(title, section.text, section.data, section.value, section.kept)


def _sites(run: Run) -> set[str]:
    return set(_order(run))


def _order(run: Run) -> list[str]:
    return list(run.histories()) if series.is_watch(run.manifest) else list(run)
