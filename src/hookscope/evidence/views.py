"""How an ``Evidence`` bundle shows itself: a few lines of text and a section of a report page."""

from __future__ import annotations

from typing import Any

from ..base.display import shows_as
from ..base.words import columns
from ..viz.fragments import Safe, note, table, view
from .result import Evidence

RANKED = 5  # layers of the gradient ranking shown


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _prediction_lines(m: dict[str, Any]) -> list[str]:
    p, layers, ablation = m["prediction"], m["layers"], m["ablation"]
    top = ", ".join(f"{row['class']} ({row['probability']:.3f})" for row in p["top_k"])
    verdict = "right" if p["correct"] else "wrong"
    block = f" and its block `{layers['block']}`" if layers["block"] else ""
    lines = [f"predicted {p['predicted']}, expected {p['expected']} ({verdict}); top: {top}",
             f"maps at `{layers['picked']}`{block}"]  # fmt: skip
    ranked = ", ".join(f"{r['layer']} {_value(r['grad_norm'])}" for r in layers["ranked"][:RANKED])
    lines.append(f"layers by |d contrastive / d output|: {ranked}")
    if ablation["status"] == "verified":
        lines.append(f"ablation of the top {ablation['positions']} positions at `{ablation['layer']}`: contrastive "
                     f"score {_value(ablation['before'])} -> {_value(ablation['after'])}, "
                     f"predicted {ablation['predicted_after']} after")  # fmt: skip
    else:
        lines.append(f"ablation refused: {ablation['why']}")
    return lines


def _alert_lines(m: dict[str, Any]) -> list[str]:
    f, r = m["finding"], m["reproducer"]
    lines = [f"{m['source']}: {f['kind']} at `{f['module']}`, step {f['step']}, {f['phase']}"
             + (f", rank {f['rank']}" if f["rank"] is not None else ""), f["message"]]  # fmt: skip
    lines.append(f"reproduce: python {r['script']}" if r["script"] else f"no reproducer: {r['why']}")
    return lines


def _honesty(m: dict[str, Any]) -> list[str]:
    facts = m.get("honesty", {})
    return [f"{key.replace('_', ' ')}: {'; '.join(facts[key])}" for key in sorted(facts) if facts[key]]


def _maps_rows(m: dict[str, Any]) -> list[list[str]]:
    rows = []
    for found in m["maps"]:
        faith = found["faithfulness"]
        auc = (_value(faith["deletion_auc"]), _value(faith["insertion_auc"])) if faith["status"] == "computed" else (
            faith["status"], "")  # fmt: skip
        rows.append([found["name"], found["score"], *auc, "blank" if found["blank"] else ""])
    return rows


def evidence_table(found: Evidence) -> str:
    """What the bundle found, its maps (a prediction's), and the honesty facts, as lines of text."""
    m = found.manifest
    lines = _prediction_lines(m) if found.kind == "prediction" else _alert_lines(m)
    if found.kind == "prediction":
        lines += columns([["map", "score", "deletion AUC", "insertion AUC", ""], *_maps_rows(m)], right=(2, 3))
    return "\n".join([f"evidence bundle ({m['schema']}) at {found.path}", *lines, *_honesty(m)])


def _place(found: Evidence) -> tuple[str, str]:
    title = "Why this prediction" if found.kind == "prediction" else "Training alert"
    return f"evidence-{found.kind}", title


@shows_as(Evidence, table=evidence_table, section=_place)
def evidence_html(found: Evidence) -> Safe:
    """The findings, the maps' faithfulness (a prediction's) and the honesty facts, one block."""
    m = found.manifest
    body = Safe("")
    for line in _prediction_lines(m) if found.kind == "prediction" else _alert_lines(m):
        body = Safe(body + note(line))
    if found.kind == "prediction":
        header = ["map", "score", "deletion AUC", "insertion AUC", ""]
        body = Safe(body + table(header, _maps_rows(m), numeric=(2, 3)))
    for line in _honesty(m):
        body = Safe(body + note(line))
    return view(body, title=f"Evidence bundle {found.path.name} ({m['schema']})")
