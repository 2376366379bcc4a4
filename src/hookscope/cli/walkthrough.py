"""What each hook kind captured, in the terminal: the lines ``hookscope demo --model lenet`` prints.

::

    for line in walkthrough(report, ["conv1", "conv2"]):
        print(line)

One row per site and kind the report drew: the hook that takes it (by the kind's point in
``hookscope.core.kinds``), its shape and dtype, and mean, std, min and max over the batch (the
report's own numbers, ``summarize``), or why the call held none.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..base.words import columns
from ..core.kinds import TABLE
from ..report.content import Report
from ..report.html import format_number

HOOK = {  # point -> the torch hook that takes a kind there
    "pre": "forward pre-hook",
    "forward": "forward hook",
    "input_grad": "tensor hook (input)",
    "output_grad": "tensor hook (output)",
    "param": "post-accumulate hook",
}


def walkthrough(report: Report, sites: Sequence[str]) -> list[str]:
    """A heading, then a row per kind drawn of each of ``sites`` (in the report's layer order)."""
    rows = []
    for layer in (layer for layer in report.layers if layer.name in sites):
        for kind in report.kinds:
            info, view = TABLE[kind], layer.view(kind)
            if view is None:
                rows.append((layer.name, kind, HOOK[info.point], "-", f"none: {layer.missing.get(kind, '')}"))
                continue
            s = view.stats
            numbers = "  ".join(f"{k} {format_number(s[k])}" for k in ("mean", "std", "min", "max"))
            shape = "(" + ", ".join(map(str, view.shape)) + f") {view.dtype}"
            rows.append((layer.name, kind, HOOK[info.point], shape, numbers))
    head = f"What each hook kind captured, on {report.input} (numbers over the whole batch):"
    return [head, *("  " + line for line in columns(rows))]
