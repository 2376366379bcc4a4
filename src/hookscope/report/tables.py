"""What ``.table()`` and ``.plot()`` give for the results the inline views draw (``report/inline.py``).

::

    print(cap.table())                 # a row per site: type, calls, kinds, shapes of call 0, size
    print(cap["conv1"].table())        # a row per call: the shape of each kind, mean and std of the first
    cap["conv1"].plot(call=0)          # that call's feature grid (a PIL image)
    print(hookscope.summarize(x).table()); hookscope.summarize(x).plot()   # statistics, histogram
    print(run.table())                 # a store's table of contents (what ``describe()`` prints)
    print(report.table())              # a row per layer of a report: shape, mean and std of each kind

``inline.py`` registers these beside each class's HTML view (``display.shows_as``); they are
plain text and PIL images, drawn with ``hookscope.base.words.columns`` and ``hookscope.viz``.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import TYPE_CHECKING

from torch import Tensor

from ..base.words import columns, format_size
from ..core.call import Call
from ..core.channels import is_channels_last
from ..core.kinds import Kind, is_gradient, names
from ..core.records import Record, forward_order
from ..errors import OptionError
from ..stats.streaming import RunningStats
from ..stats.summary import Summary
from ..store.reader import Run
from ..viz.charts import counts_plot, gradient_flow_plot, histogram_plot
from ..viz.images import feature_grid
from .content import Report
from .html import format_number

if TYPE_CHECKING:
    from PIL.Image import Image

GRID_CHANNELS = 16  # maps a call's plot draws by default


# -- a capture (any {site: Record}) ------------------------------------------------------------
def sites_plot(sites: Mapping[str, Record], *, kind: Kind | None = None) -> Image:
    """``Capture.plot`` and ``Run.plot``: the gradient flow of a gradient kind, else a histogram per
    site (None: ``grad_output`` where a site holds it, else ``output``)."""
    if kind is None:
        held = any(call.keys("grad_output") for record in sites.values() for call in record.calls)
        kind = "grad_output" if held else "output"
    if is_gradient(kind):
        return gradient_flow_plot(sites, kind=kind)
    return histogram_plot(sites, kind=kind)


def report_plot(report: Report) -> Image:
    """``Report.plot``: the page's first picture (the first image explained)."""
    if not report.pictures:
        raise OptionError(f"the report {report.title!r} has no picture; build it from images to draw one")
    from PIL import Image as PILImage

    return PILImage.open(io.BytesIO(report.pictures[0])).convert("RGB")


def sites_table(sites: Mapping[str, Record]) -> str:
    """A row per site, in forward order: type, calls, kinds held, the shape of each in call 0, bytes held."""
    rows = [("#", "site", "type", "calls", "kinds", "shapes (call 0)", "size")]
    for i, record in enumerate(forward_order(sites)):
        call = record.calls[0] if record.calls else None
        held = held_kinds(call) if call is not None else []
        shapes = "; ".join(f"{kind} {shape(first(call, kind))}" for kind in held) if call is not None else "–"
        size = sum(t.numel() * t.element_size() for c in record.calls for ts in c.tensors.values() for t in ts.values())
        rows.append((str(i), record.name or "(model)", record.type, str(len(record.calls)), ", ".join(held) or "–",
                     shapes, format_size(size)))  # fmt: skip
    return "\n".join(columns(rows, right=(0, 3, 6)))


# -- a site and a call -------------------------------------------------------------------------
def record_table(record: Record) -> str:
    """A row per call: the shape of each kind held (its first tensor), and the mean and std of its output
    (or of the first kind it holds)."""
    held = [k for k in names() if any(c.keys(k) for c in record.calls)]
    rows = [("call", *held, "mean", "std")]
    for call in record.calls:
        lead = main_kind(call)
        numbers = _moments(first(call, lead)) if lead else ("–", "–")
        rows.append((str(call.index), *(shape(first(call, k)) if call.keys(k) else "–" for k in held), *numbers))
    lines = columns(rows, right=(0, len(rows[0]) - 2, len(rows[0]) - 1))
    lead = main_kind(record.calls[0]) if record.calls else None
    which = f"; mean and std of {lead}" if lead else ""
    return "\n".join([*lines, f"{record.name or '(model)'} ({record.type}): {len(record.calls)} call(s){which}"])


def record_plot(record: Record, *, call: int = 0, kind: Kind | None = None, channels: int = GRID_CHANNELS) -> Image:
    """The feature grid of call ``call`` (see ``call_plot``)."""
    if not record.calls:
        raise OptionError(
            f"{record.name!r} was not called, so it has no call to plot; run the model inside the capture"
        )
    if not 0 <= call < len(record.calls):
        last = len(record.calls) - 1
        raise OptionError(f"{record.name!r} has {last + 1} call(s), got call={call}; pass call= from 0 to {last}")
    return call_plot(record.calls[call], kind=kind, channels=channels, module_channels=record.channels)


def call_plot(
    call: Call, *, kind: Kind | None = None, channels: int = GRID_CHANNELS, module_channels: int | None = None
) -> Image:
    """Image 0's first ``channels`` maps of ``kind`` (default: the first kind held, output first) as a grid;
    ``module_channels`` (the record's) tells a channels-last ``(B, H, W, C)`` map, drawn permuted."""
    held = held_kinds(call)
    chosen = kind if kind is not None else main_kind(call)
    if chosen is None or not call.keys(chosen):
        raise OptionError(
            f"call {call.index} of {call.site!r} holds {', '.join(held) or 'nothing'}, got kind={chosen!r}; "
            "pass one it holds as kind="
        )
    tensor = first(call, chosen).detach()
    if is_channels_last(tensor.shape, module_channels):
        tensor = tensor.permute(0, 3, 1, 2)
    maps = tensor[0] if tensor.dim() == 4 else tensor  # (C, H, W) of image 0; ViT tokens as they are
    return feature_grid(maps, channels=channels, diverging=is_gradient(chosen))


def held_kinds(call: Call) -> list[Kind]:
    """The kinds ``call`` holds a tensor of, in the table's order."""
    return [k for k in names() if call.keys(k)]


def main_kind(call: Call) -> Kind | None:
    """What a call's numbers and picture show: its output, else the first kind it holds (None: nothing)."""
    held = held_kinds(call)
    return "output" if "output" in held else next(iter(held), None)


def first(call: Call, kind: Kind) -> Tensor:
    """The first tensor of ``kind`` that ``call`` holds (its keys in layout order)."""
    return call.get(kind, call.keys(kind)[0])


# -- statistics --------------------------------------------------------------------------------
STATS = ("count", "mean", "std", "min", "max", "mean_abs", "l2", "zero_fraction", "nan_count", "inf_count")


def stats_table(stats: Summary | RunningStats) -> str:
    """A row per statistic of ``as_dict()`` (percentiles as ``p50``), the value formatted as the report does."""
    plain = stats.as_dict()
    rows = [("statistic", "value")] + [(name, format_number(plain[name])) for name in STATS]
    rows += [(f"p{float(p):g}", format_number(v)) for p, v in plain["percentiles"].items()]
    return "\n".join(columns(rows, right=(1,)))


def stats_plot(stats: Summary | RunningStats, *, log: bool = False) -> Image:
    """The histogram of the finite values (``as_dict()["histogram"]``); ``log`` puts the counts on a log scale."""
    plain = stats.as_dict()
    title = f"{plain['count']:,} values: mean {format_number(plain['mean'])}, std {format_number(plain['std'])}"
    return counts_plot(plain["histogram"]["counts"], plain["histogram"]["edges"], title=title, log=log)


# -- a store and a report ----------------------------------------------------------------------
def run_table(run: Run) -> str:
    """The store's table of contents: what ``run.describe()`` (``hookscope info``) prints."""
    return run.describe()


def report_table(report: Report) -> str:
    """A row per layer of the report: type, calls, the shape of the first kind drawn, mean and std of each kind."""
    header = ["#", "layer", "type", "calls", "shape"]
    header += [f"{kind} {stat}" for kind in report.kinds for stat in ("mean", "std")]
    rows: list[list[str]] = [header]
    for layer in report.layers:
        lead = layer.tensors[0] if layer.tensors else None
        row = [
            str(layer.index),
            layer.name or "(model)",
            layer.type,
            str(layer.calls),
            shape(lead.shape) if lead else "–",
        ]
        for kind in report.kinds:
            view = layer.view(kind)
            row += [format_number(view.stats.get(s)) if view else "–" for s in ("mean", "std")]
        rows.append(row)
    return "\n".join(columns(rows, right=(0, 3, *range(5, len(header)))))


# -- cells -------------------------------------------------------------------------------------
def shape(value: Tensor | tuple[int, ...]) -> str:
    sizes = value.shape if isinstance(value, Tensor) else value
    return "(" + ", ".join(str(s) for s in sizes) + ")"


def _moments(tensor: Tensor) -> tuple[str, str]:
    values = tensor.detach().double()
    finite = values[values.isfinite()]
    if not finite.numel():
        return ("–", "–")
    return (format_number(float(finite.mean())), format_number(float(finite.std(correction=0))))
