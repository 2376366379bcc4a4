"""Inline notebook views: what a capture, a site, a call, a summary or a store shows in a cell.

::

    cap                      # a table of sites: name, type, calls, kinds, shapes, sizes, thumbnails
    cap["conv1"]             # that site's calls, a grid of each kind
    hookscope.show(cap)      # the report's layer cards, inline

Each view is registered with ``hookscope.base.display.shows_as`` for its class (``Capture``, ``Record``,
``Call``, ``Summary``, ``RunningStats``, ``Run``, ``Report``), so Jupyter, VS Code and GitHub call
it through ``_repr_html_``, with their ``.table()`` and ``.plot()`` (``report/tables.py``);
``import hookscope`` imports this module. A view is built from
``hookscope.viz.fragments``'s blocks and the report's layer card (``templates/cards.html.j2``): one
``<div>`` with its CSS inline, pictures as ``data:`` URIs, every name escaped, no script, no URL.

Small by default: at most ``MAX_ROWS`` sites (or store rows), ``MAX_CALLS`` calls of a site and
``SHOW_LAYERS`` cards, each followed by how many more there are; thumbnails draw image 0's first
``THUMB_CHANNELS`` maps shrunk to ``THUMB_SIDE`` pixels. A store's view reads its manifest only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from ..base.display import html_of, shows_as
from ..base.words import format_size
from ..core.call import Call
from ..core.capture import Capture
from ..core.channels import is_channels_last
from ..core.kinds import Kind, choose, is_gradient, misspelled, names, per_call
from ..core.records import Record, forward_order
from ..errors import OptionError, ShapeError
from ..stats.streaming import RunningStats
from ..stats.summary import Summary
from ..store.reader import Run
from ..viz import fragments as html
from ..viz.fragments import Safe, escape
from ..viz.images import feature_grid
from . import tables
from .cards import layer_views, not_held
from .content import LayerView, Report
from .from_store import build_report_from_store
from .html import environment, format_number

MAX_ROWS = html.MAX_ROWS  # sites of a capture, rows of a store
MAX_CALLS = 8  # calls of a site
SHOW_LAYERS = 12  # layer cards drawn by show()
THUMB_CHANNELS, THUMB_SIDE = 8, 32  # a site's thumbnail
GRID_CHANNELS, GRID_SIDE = 16, 48  # a call's grids

_CARDS = """{% from "cards.html.j2" import layer_card %}<div class="layers">
{% for layer in layers %}{{ layer_card(layer, kinds, image) }}{% endfor %}</div>"""
_STATS = """{% from "cards.html.j2" import stats_block %}<div class="stats-view">{{ stats_block(s, log) }}</div>"""


@dataclass(frozen=True)
class Inline:
    """HTML that a notebook shows inline (what ``show`` returns); ``.html`` is the markup."""

    html: str
    what: str

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"<hookscope view of {self.what}>"


def show(obj: Any, *, kinds: Kind | Iterable[Kind] | None = None, max_layers: int = SHOW_LAYERS) -> Inline:
    """The report's layer cards of ``obj``, inline: the last line of a cell shows them.

    ``obj``: a capture, a store (``load``; its first batch), a ``Record``, a dict of records, or a
    ``Report``; anything else that shows itself is shown as it does. ``kinds``: the kind or kinds
    drawn of a capture, records or a site (default: every per-call kind they hold; a store and a report
    draw their own); ``max_layers``: cards drawn, the rest counted.

    Args:
        obj: what is shown (see above).
        kinds: the kind or kinds drawn of a capture, records or a site; None draws every per-call kind they hold.
        max_layers: the most cards drawn; the rest are counted.

    Returns:
        An inline view; a notebook renders its HTML.

    Raises:
        OptionError: ``obj`` cannot be shown, or an unknown kind.
    """
    if isinstance(obj, Report):
        return Inline(report_html(obj, max_layers=max_layers), f"report {obj.title!r}")
    if isinstance(obj, Run):
        report = build_report_from_store(obj, max_layers=max_layers)
        return Inline(report_html(report, max_layers=max_layers), f"store {obj.path.name!r}")
    if isinstance(obj, Record):
        obj = {obj.name: obj}
    if isinstance(obj, Mapping) and all(isinstance(r, Record) for r in obj.values()):
        drawn = _kinds(obj.values(), kinds)
        layers, left_out = layer_views(obj, drawn, max_layers=max_layers, absent=not_held)
        title = f"{len(layers) + len(left_out)} called site(s) of {_label(obj)}"
        return Inline(cards_html(layers, drawn, title=title, left_out=len(left_out)), _label(obj))
    shown = html_of(obj)
    if shown is None:
        raise OptionError(f"hookscope.show draws captures, records, stores and reports, got {type(obj).__name__}")
    return Inline(shown, type(obj).__name__)


def cards_html(
    layers: Sequence[LayerView], kinds: Sequence[str], *, title: str, left_out: int = 0, image: str = "image 0"
) -> str:
    """Layer cards as the report draws them, in one self-contained view."""
    body = environment().from_string(_CARDS).render(layers=layers, kinds=kinds, image=image)
    return html.view(Safe(body) + html.more(len(layers), len(layers) + left_out, "layers"), title=title, css=card_css())


def card_css() -> str:
    """The report's card CSS and palette, scoped (nested) under ``.hookscope-view``."""
    env = environment()
    palette = env.get_template("palette.css.j2").render(scope=".hookscope-view")
    cards = env.loader.get_source(env, "cards.css")[0]
    extra = ".layers { display: grid; gap: 12px; } .card { padding: 0; } .mono { font-family: var(--mono); }"
    return f"{palette}\n.hookscope-view {{\n{cards}\n{extra}\n}}"


# -- the views --------------------------------------------------------------------------------
@shows_as(Report, table=tables.report_table, plot=tables.report_plot)
def report_view(report: Report) -> str:
    return report_html(report)


def report_html(report: Report, *, max_layers: int = SHOW_LAYERS) -> str:
    """The report's first ``max_layers`` layer cards, under its title."""
    shown = report.layers[:max_layers]
    title = f"{report.title} · {report.model}, {report.parameters:,} parameters, input {report.input}"
    left = len(report.layers) - len(shown)
    return cards_html(shown, report.kinds, title=title, left_out=left, image=report.image_name(0))


@shows_as(Capture, table=tables.sites_table, plot=tables.sites_plot)
def capture_html(cap: Capture) -> str:
    return sites_html(cap, title=repr(cap).strip("<>"))


def sites_html(sites: Mapping[str, Record], *, title: str) -> str:
    """A table of sites in forward order: name, type, calls, kinds, shapes, size, a thumbnail."""
    records = forward_order(sites)
    rows = [_site_row(i, record) for i, record in enumerate(records[:MAX_ROWS])]
    header = ("#", "site", "type", "calls", "kinds", "shapes (call 0)", "size", "image 0")
    body = html.table(header, rows, numeric=(0, 3, 6)) + html.more(min(len(records), MAX_ROWS), len(records), "sites")
    return html.view(body, title=title)


@shows_as(
    Record,
    png=lambda record: _first_grid(record.calls[0], record.channels) if record.calls else None,
    table=tables.record_table,
    plot=tables.record_plot,
)
def record_html(record: Record) -> str:
    calls = record.calls[:MAX_CALLS]
    held = _kinds([record], None) or ("output",)
    rows = [(call.index, *(_kind_cell(call, kind, channels=record.channels) for kind in held)) for call in calls]
    body = html.table(("call", *held), rows, numeric=(0,)) if calls else html.note(_no_calls(record))
    body += html.more(len(calls), len(record.calls), "calls") + _param_grads(record)
    title = f"{record.name or '(model)'} ({record.type}): {len(record.calls)} call(s)"
    return html.view(body, title=title)


@shows_as(Call, png=lambda call: _first_grid(call), plot=tables.call_plot)
def call_html(call: Call) -> str:
    held = [kind for kind in names() if call.keys(kind)]
    figures = [_kind_cell(call, kind, caption=True) for kind in held]
    body = Safe('<div class="hs-grids">' + "".join(figures) + "</div>") if figures else html.note("nothing held")
    missing = [f"no {kind}: {why}" for kind, why in call.missing.items()]
    error = [f"raised {call.error}"] if call.error else []
    body += Safe("".join(html.note(line) for line in missing + error))
    return html.view(body, title=f"call {call.index} of {call.site or '(model)'}")


@shows_as(Summary, table=tables.stats_table, plot=tables.stats_plot)
def summary_html(summary: Summary) -> str:
    return stats_html(summary.as_dict(), title=f"Summary of {summary.count:,} values")


@shows_as(RunningStats, table=tables.stats_table, plot=tables.stats_plot)
def running_html(stats: RunningStats) -> str:
    shape = f", first shape {tuple(stats.shape)} {stats.dtype}" if stats.shape is not None else ""
    return stats_html(stats.as_dict(), title=f"RunningStats of {stats.count:,} values, {stats.updates} updates{shape}")


def stats_html(stats: Mapping[str, Any], *, title: str, log: bool = False) -> str:
    """A histogram and the numbers of a summary's ``as_dict()``, as a layer card draws them."""
    body = environment().from_string(_STATS).render(s=stats, log=log)
    return html.view(Safe(body), title=title, css=card_css() + ".hookscope-view .stats-view { max-width: 420px; }")


@shows_as(Run, table=tables.run_table, plot=tables.sites_plot)
def run_html(run: Run) -> str:
    contents = run.contents()
    rows = [
        (c.site or "(model)", c.type, c.kind, c.key, str(c.shape), c.dtype, c.tensors, format_size(c.nbytes))
        for c in contents[:MAX_ROWS]
    ]
    header = ("site", "type", "kind", "key", "shape (first)", "dtype", "tensors", "size")
    body = html.table(header, rows, numeric=(6, 7)) + html.more(len(rows), len(contents), "rows")
    if run.damaged:
        body += Safe(
            f'<p class="hs-bad">{len(run.damaged)} damaged shard(s) left out: {escape(", ".join(run.damaged))}</p>'
        )
    return html.view(body, title=repr(run).strip("<>"))


# -- cells ------------------------------------------------------------------------------------
def _site_row(index: int, record: Record) -> tuple[Any, ...]:
    call = record.calls[0] if record.calls else None
    held = [kind for kind in names() if call is not None and call.keys(kind)]
    lines = [escape(f"{kind} {_shape(call.get(kind))}") for kind in held] if call else [escape(_no_calls(record))]
    shapes = Safe("<br>".join(lines))
    size = sum(
        t.numel() * t.element_size() for c in record.calls for held_ in c.tensors.values() for t in held_.values()
    )
    thumb = _thumbnail(call, record.channels)
    return (index, record.name or "(model)", record.type, len(record.calls), ", ".join(held) or "–", shapes,
            format_size(size), thumb)  # fmt: skip


def _thumbnail(call: Call | None, channels: int | None = None) -> Any:
    if call is None:
        return ""
    for kind in ("output", *names()):
        if call.keys(kind):
            tensor = _channels_first(call.get(kind), channels)
            png = grid_png(tensor, diverging=is_gradient(kind), channels=THUMB_CHANNELS, side=THUMB_SIDE)
            if png is not None:
                return html.image_tag(png, alt=f"{kind} of {call.site}, image 0")
    return ""


def _kind_cell(call: Call, kind: Kind, *, caption: bool = False, channels: int | None = None) -> Any:
    if not call.keys(kind):
        return call.missing.get(kind, "–")
    keys = call.keys(kind)
    tensor = call.get(kind, keys[0])
    others = (
        f" (+{len(keys) - 1} more: {', '.join(keys[1:4])}{', ...' if len(keys) > 4 else ''})" if len(keys) > 1 else ""
    )
    words = f"{kind} {keys[0]}{others} {_shape(tensor)} {str(tensor.dtype).removeprefix('torch.')} · {_brief(tensor)}"
    png = grid_png(
        _channels_first(tensor, channels), diverging=is_gradient(kind), channels=GRID_CHANNELS, side=GRID_SIDE
    )
    if caption:
        return html.figure(png, words, width=192) if png is not None else html.note(words)
    picture = html.image_tag(png, alt=f"{kind} of {call.site}", width=144) if png is not None else ""
    return Safe(picture + f'<span class="hs-note">{escape(words)}</span>')


def grid_png(tensor: Tensor, *, diverging: bool, channels: int, side: int) -> bytes | None:
    """Image 0's first ``channels`` maps of a 4-D tensor, shrunk to ``side`` pixels, as a PNG; else None."""
    if tensor.dim() != 4 or not tensor.shape[0] or not tensor.shape[1] or tensor.shape[2] * tensor.shape[3] <= 1:
        return None
    maps = tensor[:1, :channels].detach().cpu().double()
    if max(maps.shape[2:]) > side:
        size = tuple(max(1, round(s * side / max(maps.shape[2:]))) for s in maps.shape[2:])
        maps = F.interpolate(maps, size=size, mode="area")
    try:
        grid = feature_grid(maps[0], channels=None, diverging=diverging, padding=1, min_tile=side // 2)
    except ShapeError:
        return None
    return html.png_bytes(grid)


def _first_grid(call: Call, channels: int | None = None) -> bytes | None:
    kind = next((k for k in ("output", *names()) if call.keys(k)), None)
    if kind is None:
        return None
    tensor = _channels_first(call.get(kind), channels)
    return grid_png(tensor, diverging=is_gradient(kind), channels=GRID_CHANNELS, side=GRID_SIDE)


def _channels_first(tensor: Tensor, channels: int | None) -> Tensor:
    """A channels-last ``(B, H, W, C)`` map of a module with ``channels`` channels as ``(B, C, H, W)``."""
    return tensor.permute(0, 3, 1, 2) if is_channels_last(tensor.shape, channels) else tensor


def _param_grads(record: Record) -> Safe:
    grads = [(name, len(g), _shape(g[0])) for name, g in record.param_grads.items() if g]
    return html.table(("parameter", "backward passes", "grad shape"), grads, numeric=(1,)) if grads else Safe("")


def _kinds(records: Any, asked: Kind | Iterable[Kind] | None) -> tuple[Kind, ...]:
    """The per-call kinds ``asked`` (checked), or those the records' calls hold, in table order."""
    if asked is not None:
        drawable = tuple(k for k in names() if per_call(k))
        chosen, wrong = choose(asked, drawable)
        if wrong or not chosen:
            got = ", ".join(map(repr, wrong)) or "none"
            got += misspelled(wrong)
            raise OptionError(f"hookscope.show draws the kinds {', '.join(drawable)}, got {got}; pass some as kinds=")
        return chosen
    held = {kind for r in records for c in r.calls for kind in c.tensors if c.tensors[kind]}
    return tuple(k for k in names() if per_call(k) and k in held)


def _brief(tensor: Tensor) -> str:
    values = tensor.detach().double()
    finite = values[values.isfinite()]
    if not finite.numel():
        return "no finite value"
    numbers = (finite.mean(), finite.std(unbiased=False), finite.min(), finite.max())
    return ", ".join(
        f"{n} {format_number(float(v))}" for n, v in zip(("mean", "std", "min", "max"), numbers, strict=True)
    )


def _shape(tensor: Tensor) -> str:
    return "(" + ", ".join(str(s) for s in tensor.shape) + ")"


def _no_calls(record: Record) -> str:
    return "not called: " + record.missing.get("call", "it did not run inside the capture")


def _label(sites: Mapping[str, Record]) -> str:
    model = getattr(sites, "model", None)
    return type(model).__name__ if model is not None else type(sites).__name__
