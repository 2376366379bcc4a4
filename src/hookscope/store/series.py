"""The time series of a training run in a store: ``History`` (one site's rows), ``Alert``, and the watch store.

``hookscope.watch`` writes a store of the usual format (``hookscope.store.format``: a folder
whose ``manifest.json`` is written atomically) that holds no batches of tensors but one table per
site, a row per logged step::

    exp.hookscope/
      manifest.json        config.source "watch", sites, "series" and "alerts" (one line per alert)
      series.safetensors   one float64 tensor (steps, len(COLUMNS)) per site, named by the site
      scalars.safetensors  one float64 tensor (n, 2) of (step, value) per scalar of ``w.log`` (loss, lr...),
                           named by the scalar; manifest "scalars" names it (a store without it has none)

``write_watch`` writes both, each whole or not at all (``write_atomically``, with the shard's
CRC-32s); ``read_histories`` and ``read_alerts`` read them back for ``hookscope.load``'s ``Run``
(``run.history(name)``, ``run.alerts``), ``describe_watch`` is what ``hookscope info`` prints.
A run that a ``NonFiniteError`` ended (``nan_guard`` inside or around the watch) keeps it as the
manifest's ``non_finite`` (``non_finite_json``; ``read_non_finite`` gives the error back: ``run.non_finite``).
A value that was not measured (a module without parameters has no weight norm) is NaN; so is one that is
undefined (the update ratio |dw| / |w| of weights whose norm was zero before the step: a zero-initialised
layer, PEFT's ``lora_B``), which ``History.undefined`` names (the manifest's ``series.undefined``: site ->
column -> steps) and tables print as ``undefined``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..base import display
from ..base.files import staged_folder
from ..base.words import closest, columns, format_size
from ..core.compiled import known_name
from ..errors import DamagedShardError, NonFiniteError, NotCapturedError, StoreError
from .format import cannot_write, write_manifest
from .schema import NON_FINITE
from .shards import MappedShards, inside, read_index, write_shard

if TYPE_CHECKING:
    from PIL.Image import Image

SOURCE = "watch"  # config.source of a watch store
SERIES = "series.safetensors"
SCALARS = "scalars.safetensors"
COLUMNS = (
    "step",
    "act_mean",  # mean of the module's output over every call of the step
    "act_std",
    "act_abs_mean",  # mean |x|
    "zeros",  # fraction of output values that are exactly 0
    "dead",  # fraction of units (channels, features) zero for every sample over the dead window
    "grad_output_norm",  # L2 norm of d loss / d output over every call of the step
    "grad_norm",  # L2 norm of the module's parameter gradients, as the optimizer sees them
    "weight_norm",  # L2 norm of its parameters after the step
    "update_ratio",  # |w_after - w_before| / |w_before| over the optimizer step
)


@dataclass(frozen=True)
class Alert:
    """Something going wrong at one module: ``kind`` (vanishing, exploding, dead, update_ratio, non_finite).

    Attributes:
        step: the optimizer step at which the bound was crossed.
        module: the watched module's dotted name.
        kind: ``vanishing``, ``exploding``, ``dead``, ``update_ratio`` or ``non_finite``.
        column: the statistic (a ``History`` column) that crossed its bound.
        value: its value at ``step``.
        bound: the threshold it crossed (``hookscope.Thresholds``).
        message: the alert in words, with what to try.
    """

    step: int
    module: str
    kind: str
    column: str  # the statistic that crossed its bound
    value: float
    bound: float
    message: str

    def __str__(self) -> str:
        return f"step {self.step}: {self.kind} at {self.module!r}: {self.message}"


class History(display.Shows):
    """One site's statistics over the logged steps: ``h["grad_norm"]`` is a list, a float per logged step.

    Args:
        name: the watched module's dotted name.
        type: its class name.
        rows: a float64 tensor ``(steps, len(COLUMNS))``, a row per logged step (``step``,
            ``act_mean``, ``act_std``, ``act_abs_mean``, ``zeros``, ``dead``, ``grad_output_norm``,
            ``grad_norm``, ``weight_norm``, ``update_ratio``).
        undefined: column -> the steps at which its value (NaN in ``rows``) is undefined rather than not
            measured (``update_ratio`` over weights of norm zero); None for none.
    """

    def __init__(
        self, name: str, type: str, rows: Tensor, undefined: Mapping[str, Sequence[int]] | None = None
    ) -> None:
        self.name, self.type = name, type
        self.rows = rows  # (steps, len(COLUMNS)) float64
        self.columns = COLUMNS
        self.undefined = {c: [int(s) for s in steps] for c, steps in (undefined or {}).items() if steps}

    def cell(self, column: str, step: int, value: float) -> str:
        """``value`` of ``column`` at ``step`` as a table shows it: ``undefined``, ``–`` (NaN) or a number.

        Args:
            column: a column of the history.
            step: the logged step of the value.
            value: the value (``self[column]`` at that step).

        Returns:
            The text of the cell.
        """
        if step in self.undefined.get(column, ()):
            return "undefined"
        return "–" if math.isnan(value) else f"{value:.4g}"

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __getitem__(self, column: str) -> list[float]:
        if column not in COLUMNS:
            raise NotCapturedError(
                f"{column!r} is not a column of a history{closest(str(column), COLUMNS)}; "
                f"the columns are {', '.join(COLUMNS)}"
            )
        values: list[float] = self.rows[:, COLUMNS.index(column)].tolist()
        return values

    @property
    def steps(self) -> list[int]:
        return [int(s) for s in self["step"]]

    def row(self, step: int) -> dict[str, float]:
        """The statistics logged at ``step``, by column.

        Args:
            step: a logged optimizer step (one of ``h.steps``).

        Returns:
            Column name -> value at that step.

        Raises:
            NotCapturedError: ``step`` was not logged; the message names the nearest logged step.
        """
        if step not in self.steps:
            raise NotCapturedError(
                f"step {step!r} was not logged for {self.name!r} (logged: {_span(self.steps)}"
                f"{_nearest(step, self.steps)}); pass one of h.steps"
            )
        values: list[float] = self.rows[self.steps.index(step)].tolist()
        return dict(zip(COLUMNS, values, strict=True))

    def last(self) -> dict[str, float]:
        """The newest row (empty when nothing was logged).

        Returns:
            Column name -> value at the last logged step.
        """
        return self.row(self.steps[-1]) if len(self) else {}

    def table(self, *, columns: Sequence[str] | None = None) -> str:
        """A row per logged step of ``columns`` (default: the usual statistics that were measured), as text.

        Args:
            columns: the columns shown; None shows the usual statistics that were measured.

        Returns:
            The table, as text.
        """
        return display.table_of(self, columns=columns)

    def plot(self, *, column: str = "grad_norm", log: bool | None = None) -> Image:
        """``column`` over the logged steps (the training report's chart, one line), as a PIL image.

        Args:
            column: the statistic drawn (default ``grad_norm``).
            log: a log scale for the values; None decides from the column and its range.

        Returns:
            A PIL image of the chart.

        Raises:
            NotCapturedError: ``column`` is not a column of a history.
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        image: Image = display.plot_of(self, column=column, log=log)
        return image

    def __repr__(self) -> str:
        return f"<History {self.name!r} ({self.type}): {len(self)} logged steps, {_span(self.steps)}>"


def is_watch(manifest: Mapping[str, Any]) -> bool:
    """Whether ``manifest`` is that of a store written by ``hookscope.watch``."""
    return bool(manifest.get("config", {}).get("source") == SOURCE)


def write_watch(
    root: Path,
    manifest: dict[str, Any],
    histories: Mapping[str, History],
    alerts: Sequence[Alert],
    *,
    whole: bool = False,
    ranks: Sequence[Mapping[str, History]] = (),
    scalars: Mapping[str, Tensor] | None = None,
) -> None:
    """Write the series file (and the scalars' file), then the manifest that names them (each atomically).
    ``whole``: the store's first write, made in a staged folder renamed to ``root`` when all are written, so a
    first write that fails leaves nothing (and an old store replaced under ``force`` stays until then).
    ``ranks``: each rank's own histories under torchrun, stored as ``rank{r}/{site}`` beside the merged ones."""
    if not whole:
        _write_all(root, manifest, histories, alerts, ranks, scalars)
        return
    with staged_folder(root, lambda err, folder: cannot_write(err, folder, root), parents=True) as staging:
        _write_all(staging, manifest, histories, alerts, ranks, scalars)


def _write_all(
    root: Path,
    manifest: dict[str, Any],
    histories: Mapping[str, History],
    alerts: Sequence[Alert],
    ranks: Sequence[Mapping[str, History]],
    scalars: Mapping[str, Tensor] | None,
) -> None:
    tensors = {name: h.rows.contiguous() for name, h in histories.items()}
    tensors.update({f"rank{r}/{n}": h.rows.contiguous() for r, hs in enumerate(ranks) for n, h in hs.items()})
    write_shard(root / SERIES, tensors, {"columns": list(COLUMNS)})
    steps = sorted({s for h in histories.values() for s in h.steps})
    series: dict[str, Any] = {"file": SERIES, "columns": list(COLUMNS), "logged_steps": len(steps), "ranks": len(ranks)}
    undefined = {name: h.undefined for name, h in histories.items() if h.undefined}
    if undefined:
        series["undefined"] = undefined
    extra = {}
    if scalars:
        write_shard(root / SCALARS, {k: v.contiguous() for k, v in scalars.items()}, {"columns": ["step", "value"]})
        extra = {"scalars": {"file": SCALARS, "names": list(scalars)}}
    write_manifest(root, {**manifest, "series": series, **extra, "alerts": [_alert_json(a) for a in alerts]})


def read_scalars(root: Path, manifest: Mapping[str, Any], mapped: MappedShards) -> dict[str, list[tuple[int, float]]]:
    """``{name: [(step, value), ...]}`` of the scalars ``w.log`` logged (empty for a store without any)."""
    entry = manifest.get("scalars")
    if not entry:
        return {}
    index = read_index(root / entry["file"])
    crc = index["meta"].get("crc32", {})
    out = {}
    for name in entry["names"]:
        dtype, shape, offsets = index["tensors"][name]
        rows = mapped.tensor(entry["file"], index["data_start"], dtype, shape, offsets, crc.get(name, -1))
        out[name] = [(int(step), float(value)) for step, value in rows.tolist()]
    return out


def read_histories(
    root: Path, manifest: Mapping[str, Any], mapped: MappedShards, *, prefix: str = ""
) -> dict[str, History]:
    """Every site's history, in the manifest's site order (tensors memory-mapped, each a float64
    ``(steps, len(COLUMNS))`` table, or the series file is damaged); ``prefix`` ``"rank1/"`` reads rank 1's
    own rows of a watch under torchrun."""
    series = manifest.get("series")
    if not series:
        return {}
    try:
        index = read_index(inside(root, series["file"]))
    except DamagedShardError as err:
        raise DamagedShardError(series["file"], err.why, "; the store's time series cannot be read") from err
    types = {s["name"]: s.get("type", "?") for s in manifest.get("sites", [])}
    undefined = series.get("undefined", {}) if not prefix else {}
    crc = index["meta"].get("crc32", {})
    out = {}
    for name in [s for s in types if prefix + s in index["tensors"]]:
        dtype, shape, offsets = index["tensors"][prefix + name]
        if dtype != "float64" or len(shape) != 2 or shape[1] != len(COLUMNS):
            raise DamagedShardError(series["file"], f"the series of {prefix + name!r} is {dtype} {shape}, not "
                                    f"float64 (steps, {len(COLUMNS)})")  # fmt: skip
        rows = mapped.tensor(series["file"], index["data_start"], dtype, shape, offsets, crc.get(prefix + name, -1))
        out[name] = History(name, types[name], rows, undefined.get(name))
    return out


def pick(histories: Mapping[str, History], name: str, root: Path) -> History:
    """``histories[name]`` (``name`` with or without a wrapper's ``module.``: ``core.compiled.known_name``; the
    model itself as ``""`` or ``(model)``, as tables show it), or a ``NotCapturedError`` naming the closest."""
    name = "" if name == "(model)" and "" in histories else known_name(name, histories)
    if name not in histories:
        what = (
            "holds no time series (it was not written by hookscope.watch)"
            if not histories
            else (f"watched {len(histories)} modules{closest(name, histories)}")
        )
        raise NotCapturedError(f"{name!r} has no history in {root}: the store {what}")
    return histories[name]


def read_alerts(manifest: Mapping[str, Any]) -> list[Alert]:
    return [
        Alert(**{**a, "value": _number(a["value"]), "bound": _number(a["bound"])}) for a in manifest.get("alerts", [])
    ]


def non_finite_json(err: NonFiniteError) -> dict[str, Any]:
    """The manifest's ``non_finite``: where ``err`` was found (``schema.NON_FINITE``), and its message."""
    row = {name: getattr(err, name) for name in NON_FINITE if name != "message"}
    absmax = err.input_absmax
    return {**row, "input_absmax": None if absmax is None else _text(float(absmax)), "message": str(err)}


def read_non_finite(manifest: Mapping[str, Any]) -> NonFiniteError | None:
    """The ``NonFiniteError`` that ended the watched run, as it was raised (None: the run did not end on one)."""
    row = manifest.get("non_finite")
    if row is None:
        return None
    fields = {name: row[name] for name in NON_FINITE if name != "message"}
    absmax = fields["input_absmax"]
    return NonFiniteError(row["message"], **{**fields, "input_absmax": None if absmax is None else float(absmax)})


def describe_watch(
    path: Path,
    manifest: Mapping[str, Any],
    histories: Mapping[str, History],
    scalars: Mapping[str, Sequence[tuple[int, float]]] | None = None,
) -> str:
    """What ``hookscope info`` prints of a watch store: the run, its scalars, its alerts, the last row of every site."""
    prov, config = manifest.get("provenance", {}), manifest.get("config", {})
    alerts = read_alerts(manifest)
    steps = sorted({s for h in histories.values() for s in h.steps})
    try:
        size = format_size(sum(p.stat().st_size for p in path.iterdir() if p.is_file()))
    except OSError as err:
        raise StoreError(f"cannot read {path}: {err.strerror or err}") from err
    state = "complete" if manifest.get("status") == "complete" else "interrupted (the run did not reach its end)"
    head = [
        f"{path}: hookscope watch store (format {manifest.get('version')}), {state}",
        f"model     {prov.get('model', '?')} ({prov.get('model_module', '?')}), "
        f"{prov.get('parameters', 0):,} parameters",
        f"made by   hookscope {prov.get('hookscope')}, torch {prov.get('torch')}, Python {prov.get('python')}, "
        f"{prov.get('created')}",
        f"run       watch every {config.get('every')} steps: {config.get('steps', 0):,} steps, {len(steps)} logged "
        f"({_span(steps)}), select {config.get('select') or 'every module holding parameters, and activations'}",
        *_ranks_line(config, manifest.get("series") or {}),
        *_stopped_line(read_non_finite(manifest)),
        *scalar_lines(scalars or {}),
        f"alerts    {len(alerts)}" + "".join(f"\n          {a}" for a in alerts[:10]),
        f"size      {size}",
        "",
    ]
    shown = ("grad_norm", "update_ratio", "dead", "act_std")
    rows = [["site", "type", "steps", *(f"last {c}" for c in shown)]]
    rows += [[n or "(model)", h.type, str(len(h)), *(_last_cell(h, c) for c in shown)] for n, h in histories.items()]
    return "\n".join(head + columns(rows, right={2, 3, 4, 5, 6}))


def scalar_lines(scalars: Mapping[str, Sequence[tuple[int, float]]]) -> list[str]:
    """The scalars of ``w.log`` a watch store keeps: one line each, its values, first and last step, last value."""
    if not scalars:
        return ["scalars   none (w.log(loss=...) keeps them beside the statistics)"]
    width = max(len(name) for name in scalars)
    lines = [f"scalars   {len(scalars)} logged with w.log (run.scalars())"]
    for name, pairs in scalars.items():
        steps = sorted(step for step, _ in pairs)
        last = f", last {_cell(pairs[-1][1])}" if pairs else ""
        lines.append(f"          {name:<{width}}  {len(pairs):,} value{'s' * (len(pairs) != 1)}, {_span(steps)}{last}")
    return lines


def _ranks_line(config: Mapping[str, Any], series: Mapping[str, Any]) -> list[str]:
    """Under torchrun: how many ranks, and that the rows are merged over them (each rank's kept too)."""
    size = int(config.get("world_size", 1))
    if size <= 1:
        return []
    kept = "; each rank's own rows are kept as rank<r>/<site>" if series.get("ranks") else ""
    return [f"ranks     {size} under torchrun: statistics merged over the ranks{kept}"]


def _stopped_line(err: NonFiniteError | None) -> list[str]:
    """The ``NonFiniteError`` that ended the run: where it was found, then its message."""
    if err is None:
        return []
    rank = "" if err.rank is None else f", rank {err.rank}"
    call = "" if err.call is None else f" call {err.call}"
    who = repr(err.module) if err.module else "the model"
    where = f"step {err.step}, {err.phase}, {who}{call}, {err.kind} {err.key}{rank}"
    return [f"ended by  NonFiniteError at {where}\n          {err}"]


def read_rank_histories(root: Path, manifest: Mapping[str, Any], mapped: MappedShards) -> list[dict[str, History]]:
    """Each rank's own histories (a watch under torchrun), in rank order; empty for one process."""
    ranks = int((manifest.get("series") or {}).get("ranks", 0))
    return [read_histories(root, manifest, mapped, prefix=f"rank{r}/") for r in range(ranks)]


def _alert_json(alert: Alert) -> dict[str, Any]:
    row = asdict(alert)
    return {**row, "value": _text(alert.value), "bound": _text(alert.bound)}


def _text(value: float) -> float | str:
    """JSON has no NaN or infinity: those are written as text (``"nan"``, ``"inf"``)."""
    return value if math.isfinite(value) else str(value)


def _number(value: float | str) -> float:
    return float(value)


def _last_cell(history: History, column: str) -> str:
    last = history.last()
    return "undefined" if last and int(last["step"]) in history.undefined.get(column, ()) else _cell(last.get(column))


def _cell(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3g}"


def _span(steps: Sequence[int]) -> str:
    if not steps:
        return "none"
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}..{steps[-1]}"


def _nearest(step: object, steps: Sequence[int]) -> str:
    """``"; nearest: 10, 20"``: the logged steps either side of ``step`` (``""`` for none, or a non-number)."""
    if not steps or isinstance(step, bool) or not isinstance(step, (int, float)):
        return ""
    below = [s for s in steps if s < step][-1:]
    above = [s for s in steps if s > step][:1]
    return f"; nearest: {', '.join(map(str, below + above))}"
