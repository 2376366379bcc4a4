"""The page: ``render_html(page) -> str`` (jinja2, autoescaped, everything inline) and ``write_report``.

Its neighbours make the ``Report`` it draws: ``views`` (the page's data), ``build`` (a report of
a model and an input) and ``from_store`` (a report of a store).

``render_html`` turns a ``Report`` into one self-contained page with the template
``templates/report.html.j2`` (package data, ``TEMPLATE`` inside ``hookscope``): every layer name
and user string is escaped, images are inline ``data:`` URIs, CSS and JS are inline, nothing is
fetched when the page is opened. Each layer's card draws the report's kinds in order, each
headed by its name (but an output that opens the card); a gradient kind (``is_gradient``) is
drawn diverging, with a log-count histogram.

Both take any of the three pages: a ``Report`` (``build_report``), a text report
(``tokens.build_text_report``) or a training report (``training.build_training_report``); the
other two register their renderer with :func:`draws_page`, so this module need not import them.

``write_report`` fills a staged folder next to ``out`` (``hookscope.base.files.staged_folder``) that
is renamed into place only when complete, so an interrupted run never leaves a half-written report.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from ..base.files import mark, new_output, staged_folder
from ..base.optional import require
from ..base.words import format_size
from ..core.kinds import is_gradient
from ..errors import OptionError, StoreError
from ..graph.nodes import Graph
from ..graph.svg import graph_html
from ..viz.fragments import data_uri
from .content import LayerView, Report

TEMPLATE = "report/templates/report.html.j2"  # the page's template, a file of the hookscope package
Render = TypeVar("Render", bound=Callable[[Any], str])
_PAGES: dict[type, Callable[[Any], str]] = {}


def draws_page(cls: type) -> Callable[[Render], Render]:
    """Register the decorated ``render(page) -> str`` as what ``render_html`` and ``write_report`` do with a ``cls``."""

    def register(render: Render) -> Render:
        _PAGES[cls] = render
        return render

    return register


def render_html(report: object) -> str:
    """The page as one self-contained HTML file: images inline, CSS (and the report's JS) inline, nothing fetched.

    ``report``: a ``Report`` (``build_report``), a text report (``build_text_report``) or a training
    report (``build_training_report``).

    Args:
        report: what ``build_report``, ``build_text_report`` or ``build_training_report`` returned.

    Returns:
        The whole page as an HTML string.

    Raises:
        OptionError: ``report`` is none of those.
        MissingDependencyError: jinja2 is not installed.
    """
    render = next((_PAGES[k] for k in type(report).__mro__ if k in _PAGES), None)
    if render is None:
        raise OptionError(
            "render_html and write_report draw a page of build_report, build_text_report or build_training_report, "
            f"got a {type(report).__name__}; build one of those first"
        )
    return render(report)


@draws_page(Report)
def _report_page(report: Report) -> str:
    types = sorted({layer.type for layer in report.layers})
    graph, saved = graph_parts(report.graph, report.layers)
    template = environment().get_template(TEMPLATE.rsplit("/", 1)[1])
    html: str = template.render(report=report, types=types, graph=graph, saved=saved)
    return html


def graph_parts(graph: Graph | None, layers: Sequence[LayerView]) -> tuple[Any, dict[str, int]]:
    """The graph's HTML (its boxes link to the layer cards, ``#layer-N``) and the bytes each layer's forward
    left saved for the backward, by name (a module that ran more than once: over all its calls); (None, {})
    without a graph."""
    if graph is None:
        return None, {}
    markupsafe: Any = require("markupsafe")
    links = {layer.name: f"#layer-{layer.index}" for layer in layers}
    saved: dict[str, int] = {}
    for node in graph.nodes:
        saved[node.module] = saved.get(node.module, 0) + graph.saved_under(node.name)
    return markupsafe.Markup(graph_html(graph, links=links)), saved


def environment() -> Any:
    """The jinja2 environment of the report's templates (autoescaped), with the page's filters and globals.

    Its templates are the files beside ``TEMPLATE``: the page, and the partials it shares with the
    inline views (``cards.html.j2``, ``cards.css``, ``palette.css.j2``).
    """
    jinja2 = require("jinja2")
    folder = TEMPLATE.rsplit("/", 1)[0]

    def source(name: str) -> str:
        return resources.files("hookscope").joinpath(folder, name).read_text(encoding="utf-8")

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(source),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(png=data_uri, num=format_number, percent=_percent, shape=_shape, breakable=_breakable)
    env.filters.update(bytes=format_size)
    env.globals.update(
        histogram=_histogram_bars, value_bars=_value_bars, numel=math.prod, isfinite=_isfinite, is_gradient=is_gradient
    )
    return env


def write_report(report: object, out: str | Path, *, force: bool = False) -> Path:
    """Write ``out/index.html`` of any page ``render_html`` draws and return its path; ``out`` is replaced
    only once the new one is complete, and an existing one only with ``force`` (``base.files.new_output``).

    Args:
        report: what ``build_report``, ``build_text_report`` or ``build_training_report`` returned.
        out: the folder the page is written to, as ``out/index.html``.
        force: replace an existing ``out`` that hookscope wrote (a folder holding anything else is
            never replaced).

    Returns:
        The path of ``index.html``.

    Raises:
        OutputExistsError: ``out`` exists and ``force`` is False, or it holds files hookscope did not write.
        OptionError: ``out`` is a file, or ``report`` is not a page.
        StoreError: the page cannot be written; ``out`` is left as it was.
    """
    return write_page(lambda: render_html(report), out, force=force)


def write_page(render: Callable[[], str], out: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write the page ``render()`` makes to ``out/index.html`` and return its path (every report's writer).

    An existing ``out`` is replaced only with ``force`` and only when hookscope wrote it
    (``base.files.new_output``); the page is marked as hookscope's (``mark``). It is written into a
    hidden folder next to ``out`` (same file system), which is then renamed into place; on any error
    that folder is removed and ``out`` is left as it was (a disk that fails is a ``StoreError`` naming
    the path and the reason).
    """
    folder = new_output(out, force=force, kind="report")  # absolute: "." and ".." have no name to stage next to

    def cannot(err: OSError, where: Path) -> StoreError:
        return StoreError(f"cannot write the report to {folder}: {err.strerror or err} ({where})")

    page = render()
    try:
        with staged_folder(folder, cannot) as staging:
            (staging / "index.html").write_text(page, encoding="utf-8")
            mark(staging, "report")
    except OSError as err:  # the page, or the rename into place (a full disk, a folder made read-only)
        raise cannot(err, Path(err.filename or folder)) from err
    return folder / "index.html"


# -- template helpers -------------------------------------------------------------------------
def format_number(value: float | int | None) -> str:
    """Short: ints and floats from 1,000 with separators, 4 digits below, "-3.7e-4" far from 1, "0" for -0.0."""
    if value is None:  # as_dict's NaN
        return "–"
    if value == 0:  # -0.0 too: a median of ReLU'd negatives is -0.0, and "-0" reads as a sign that is not there
        return "0"
    if isinstance(value, int) or 1e3 <= abs(value) < 1e6:
        return f"{value:,.0f}"
    if 1e-3 <= abs(value) < 1e3:
        return f"{value:.4g}"
    if not math.isfinite(value):
        return str(value)
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _breakable(name: str) -> Any:
    """A layer name, escaped, that may wrap after each dot (``<wbr>``) rather than mid-word."""
    markupsafe: Any = require("markupsafe")
    return markupsafe.escape(name).replace(".", markupsafe.Markup(".<wbr>"))


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


def _isfinite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _histogram_bars(
    histogram: Mapping[str, list[Any]], *, log: bool = False, width: float = 240, height: float = 56
) -> dict[str, Any]:
    """Bars (x, y, w, h) of a stats histogram in a ``width`` x ``height`` box, and where 0 falls (x).

    ``log`` scales heights by log(1 + count): the tails of heavy-tailed gradients stay visible.
    """
    counts, edges = histogram["counts"], histogram["edges"]
    if not counts:
        return {"bars": [], "zero": None}
    scaled = [math.log1p(c) for c in counts] if log else [float(c) for c in counts]
    peak, lo, hi = max(scaled) or 1.0, edges[0], edges[-1]
    step = width / len(counts)
    bars = [(i * step, height * (1 - v / peak), step * 0.9, height * v / peak) for i, v in enumerate(scaled) if v]
    zero = width * (0 - lo) / (hi - lo) if lo < 0 < hi else None
    return {"bars": bars, "zero": zero}


def _value_bars(values: Sequence[float], width: float = 240, height: float = 96) -> dict[str, Any]:
    """Signed bars (x, y, w, h, negative) of ``values`` around a zero line at ``zero`` (y)."""
    top, bottom = max(0.0, *values), min(0.0, *values)
    span = (top - bottom) or 1.0
    zero = height * top / span
    step = width / max(len(values), 1)
    bars = [
        (i * step, min(zero, zero - height * v / span), step * 0.85, abs(height * v / span), v < 0)
        for i, v in enumerate(values)
    ]
    return {"bars": bars, "zero": zero}
