"""The ``bundle`` tool: an evidence bundle read for an assistant, checked against its schema first.

A bundle's problems (``evidence.bundle.validate_bundle``: the manifest against its shipped schema,
every listed file there, nothing unlisted, every array loadable without pickle) and what it says
could not be said (blank maps, layers that never ran, what was refused) are kept facts. Then, for
a wrong prediction: the prediction, each map with its faithfulness, the verified ablation, the
layers ranked by the contrastive gradient, provenance; for a training alert: the finding, the
producer's ranges, the reproducer, the last logged rows, provenance. Only ``manifest.json`` is read:
``state.pt`` and ``batch.pt`` are pickles and are never opened here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..evidence.bundle import PREDICTION, validate_bundle
from .budget import Section, compact, table_sections


def bundle(path: str) -> list[Section]:
    """An evidence bundle (a wrong prediction's or a training alert's): its problems, then what it found.

    Args:
        path: the bundle's folder (``explain_prediction``, ``watch(evidence=)`` or ``nan_guard(evidence=)``).

    Returns:
        The sections of the answer.

    Raises:
        InputError: ``path`` is not a folder.
    """
    if not Path(path).is_dir():
        raise InputError(f"{path} is not a folder; pass an evidence bundle's folder (explain_prediction, evidence=)")
    problems = validate_bundle(path)
    manifest = _manifest(Path(path))
    what = {PREDICTION: "wrong-prediction"}.get(manifest.get("schema", ""), "training-alert")
    sound = "sound: the manifest meets its schema, every file it lists is there" if not problems else "NOT sound"
    head = [f"{path}: an evidence bundle ({manifest.get('schema', 'no schema')}), {sound}."]
    head += [f"Problem: {line}" for line in problems]
    parts = [Section("Status", "\n".join(head), {"schema": manifest.get("schema"), "problems": problems},
                     value=100, kept=True)]  # fmt: skip
    if problems or not manifest:
        return parts
    return parts + (_prediction(manifest) if what == "wrong-prediction" else _alert(manifest))


def _prediction(m: dict[str, Any]) -> list[Section]:
    p, honesty = m["prediction"], m["honesty"]
    facts = [f"{k.replace('_', ' ')}: {', '.join(v)}" for k, v in honesty.items() if v and k != "notes"]
    parts = []
    if facts:
        parts.append(Section("What could not be said", "\n".join(facts), honesty, value=98, kept=True))
    top = ", ".join(f"{row['class']} ({row['probability']:.3f})" for row in p["top_k"])
    verdict = "right" if p["correct"] else "wrong"
    parts.append(Section("Prediction", f"predicted {p['predicted']}, expected {p['expected']} ({verdict}); top: {top}",
                         p, value=95))  # fmt: skip
    rows = [[s["name"], s["score"], "yes" if s["blank"] else "no", *_faith(s["faithfulness"])] for s in m["maps"]]
    header = ["map", "score", "blank", "deletion AUC (random)", "insertion AUC (random)", "remarks"]
    parts += table_sections("Maps and their faithfulness", header, rows, value=90)
    parts.append(Section("Ablation", _ablation(m["ablation"]), m["ablation"], value=85))
    ranked = [[r["layer"], f"{r['grad_norm']:.4g}"] for r in m["layers"]["ranked"]]
    block = m["layers"]["block"] or "none (the layer is a module of the model itself)"
    why = f"picked {m['layers']['picked']} ({m['layers']['why']}); block {block}"
    parts.append(Section("Layer picked", why, {k: v for k, v in m["layers"].items() if k != "ranked"}, value=70))
    parts += table_sections("Layers by the contrastive gradient's norm", ["layer", "grad norm"], ranked, value=60,
                            first=10)  # fmt: skip
    if honesty.get("notes"):
        parts.append(Section("Notes", "\n".join(honesty["notes"]), honesty["notes"], value=50))
    parts.append(Section("Provenance", compact(m["provenance"]), m["provenance"], value=40))
    return parts


def _alert(m: dict[str, Any]) -> list[Section]:
    f = m["finding"]
    where = f"{f['kind']} at {f['module']!r}, step {f['step']}, {f['phase']}" + (
        f", rank {f['rank']}" if f.get("rank") is not None else ""
    )
    parts = [Section("Finding", f"{m['source']}: {where}\n{f['message']}", f, value=98, kept=True)]
    ranges = m.get("ranges") or {}
    lines = [f"{side} {r['key']}: min {r['min']}, max {r['max']}, {r['nan']} NaN, {r['inf']} Inf"
             for side in ("inputs", "outputs") for r in ranges.get(side, [])]  # fmt: skip
    if ranges.get("why"):
        lines.append(ranges["why"])
    if lines:
        parts.append(Section("The producer's ranges", "\n".join(lines), ranges, value=85))
    r = m["reproducer"]
    how = f"run {r['script']}" if r.get("script") else f"no script: {r.get('why')}"
    text = f"seed {r['seed']}, batch {r['batch_index']}; {how}; weights sha256 {str(r['weights_sha256'])[:16]}"
    parts.append(Section("Reproducer", text, r, value=80))
    if m.get("last_rows"):
        rows = m["last_rows"]
        header = list(rows[0])
        parts += table_sections("Last logged rows", header, [[_cell(row.get(h)) for h in header] for row in rows],
                                value=60)  # fmt: skip
    return parts


def _faith(found: dict[str, Any]) -> list[str]:
    if found.get("status") != "computed":
        return ["not computed", "not computed", "; ".join(found.get("remarks", []))]
    cells = [f"{found[f'{m}_auc']:.3f} ({found[f'random_{m}_auc']:.3f})" for m in ("deletion", "insertion")]
    return [*cells, "; ".join(found.get("remarks", []))]


def _ablation(a: dict[str, Any]) -> str:
    if a.get("status") != "verified":
        return compact(a)
    verdict = "confirms the map (the score fell)"
    if not a["confirms"]:
        verdict = "does NOT confirm the map (the score did not fall)"
    return (f"zeroing {a['positions']} top positions ({a['fraction']:.0%}) of {a['map']} at {a['layer']} "
            f"(edit tally: {a['tally']['calls']} call, {a['tally']['changed']} of {a['tally']['numel']} elements "
            f"changed) moved the score {a['before']:.4g} -> {a['after']:.4g}: {verdict}")  # fmt: skip


def _manifest(folder: Path) -> dict[str, Any]:
    """The manifest, or ``{}`` when it cannot be read (``validate_bundle`` has said why)."""
    try:
        found = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
