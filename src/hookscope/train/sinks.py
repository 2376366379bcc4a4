"""Where a watch sends its numbers besides its store: ``watch(..., sinks=["tensorboard:runs/tb", "trackio:exp1"])``.

=============================== ===================================================================
sink                            what it writes
=============================== ===================================================================
``tensorboard:DIR``             ``SummaryWriter(DIR)``: scalars, histograms (``train.board``), alerts
                                as text (``tensorboard=DIR``: its deprecated spelling)
``trackio:PROJECT``             a trackio run of ``PROJECT`` (local SQLite under ``TRACKIO_DIR``):
                                scalars, and each alert as ``trackio.alert`` (ERROR for
                                ``non_finite``, WARN for the others) naming module, kind and step
``mlflow:URI``                  a run of the experiment ``hookscope`` in the tracking store ``URI``
                                (``file:///...``, ``sqlite:///...``, ``http://...``): metrics, and
                                each alert as a tag ``hookscope.alert.N``
``wandb:MODE``                  a W&B run (``MODE`` offline or online, project ``hookscope``, files
                                under ``WANDB_DIR``): metrics and ``run.alert``
=============================== ===================================================================

Every sink gets, per step, the scalars of ``w.log`` and on logged steps every module's statistics
as ``{module}/{column}`` (finite values only), in step order; ``close`` ends its run. A sink whose
package is missing is a ``MissingDependencyError`` naming the ``pip install`` that fixes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..base.deprecation import warn_renamed
from ..base.optional import require, require_all
from ..errors import OptionError
from ..store.history import Alert
from .board import Board

TOOLS = ("tensorboard", "trackio", "mlflow", "wandb")  # the tools a sink writes to (KINDS are what a capture keeps)
EXPERIMENT = "hookscope"  # the MLflow experiment and the W&B project of a watch's runs


def __getattr__(name: str) -> Any:
    """``KINDS``, this module's old name of ``TOOLS``, for one release (``hookscope.KINDS`` are capture kinds)."""
    if name == "KINDS":
        warn_renamed("hookscope.train.sinks.KINDS", "hookscope.train.sinks.TOOLS")
        return TOOLS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Sink(Protocol):
    def scalars(self, step: int, values: Mapping[str, float]) -> None: ...

    def alert(self, alert: Alert) -> None: ...

    def close(self) -> None: ...


def parse(specs: Sequence[Any] | str | None) -> list[tuple[str, Any]]:
    """``["trackio:exp1", ...]`` -> ``[("trackio", "exp1"), ...]``, refused before anything is opened; an
    object with ``scalars``, ``alert`` and ``close`` methods is a sink as it is."""
    found = [specs] if isinstance(specs, str) else list(specs or [])
    out: list[tuple[str, Any]] = []
    for spec in found:
        if not isinstance(spec, str) and all(callable(getattr(spec, m, None)) for m in ("scalars", "alert", "close")):
            out.append(("object", spec))  # a Sink made by the caller (integrations.accelerate)
            continue
        kind, _, where = str(spec).partition(":")
        if kind not in TOOLS or not where:
            raise OptionError(f"sinks= takes 'TOOL:WHERE' with TOOL one of {', '.join(TOOLS)} (e.g. "
                              f"'tensorboard:runs/tb', 'trackio:exp1', 'wandb:offline'); got {spec!r}")  # fmt: skip
        if kind == "wandb" and where not in ("offline", "online"):
            raise OptionError(f"a wandb sink is 'wandb:offline' or 'wandb:online', got {spec!r}")
        out.append((kind, where))
    return out


def open_sinks(specs: list[tuple[str, Any]], *, name: str) -> list[Sink]:
    """Each sink opened (a run named ``name`` where the tracker has runs); on a failure those opened close.
    The trackers' packages are checked first: one error names every one missing."""
    trackers = [(kind, where) for kind, where in specs if kind in TOOLS]  # each tool is its package's import name
    require_all([kind for kind, _ in trackers], needed_by=f"watch(sinks={[f'{k}:{w}' for k, w in trackers]})")
    opened: list[Sink] = []
    try:
        for kind, where in specs:
            opened.append(_OPENERS[kind](where, name))
    except BaseException:
        close_all(opened)
        raise
    return opened


def send(sinks: Sequence[Sink], table: Mapping[int, Mapping[str, float]], alerts: Sequence[Alert] = ()) -> None:
    """Scalars by step, then alerts, to every sink."""
    for sink in sinks:
        for at, values in table.items():
            sink.scalars(at, values)
        for alert in alerts:
            sink.alert(alert)


def close_all(sinks: Sequence[Sink]) -> None:
    """Close every sink, even when one fails (the first failure is raised after)."""
    failure: BaseException | None = None
    for sink in sinks:
        try:
            sink.close()
        except Exception as err:  # noqa: PERF203 - each sink closes whatever the others do
            failure = failure or err
    if failure is not None:
        raise failure


def alert_title(alert: Alert) -> str:
    return f"hookscope: {alert.kind} at {alert.module} (step {alert.step})"


class TrackioSink:
    """A trackio run of ``project`` (``trackio.init``; alerts through ``Run.alert``)."""

    def __init__(self, project: str, name: str) -> None:
        self._trackio = require("trackio")
        self._run = self._trackio.init(project=project, embed=False, auto_log_gpu=False, auto_log_cpu=False)

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        self._run.log(dict(values), step=step)

    def alert(self, alert: Alert) -> None:
        level = self._trackio.AlertLevel.ERROR if alert.kind == "non_finite" else self._trackio.AlertLevel.WARN
        self._run.alert(title=alert_title(alert), text=alert.message, level=level, step=alert.step)

    def close(self) -> None:
        current = getattr(getattr(self._trackio, "context_vars", None), "current_run", None)
        if current is not None and current.get() is self._run:
            self._trackio.finish()  # also forgets the run: trackio's exit hook would finish it again, and print
        else:
            self._run.finish()


class MlflowSink:
    """A run of the experiment ``hookscope`` in the MLflow tracking store ``uri`` (``MlflowClient``)."""

    def __init__(self, uri: str, name: str) -> None:
        if uri.startswith("file:") and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() != "true":
            raise OptionError(f"MLflow refuses its file store {uri} unless MLFLOW_ALLOW_FILE_STORE=true is set; set "
                              "it, or pass a database store such as 'mlflow:sqlite:///mlflow.db'")  # fmt: skip
        self._entities = require("mlflow.entities")
        self._client = require("mlflow.tracking").MlflowClient(tracking_uri=uri)
        found = self._client.get_experiment_by_name(EXPERIMENT)
        experiment = found.experiment_id if found is not None else self._client.create_experiment(EXPERIMENT)
        self.run_id: str = self._client.create_run(experiment, run_name=name).info.run_id
        self._alerts = 0

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        metric = self._entities.Metric
        self._client.log_batch(self.run_id, metrics=[metric(_mlflow_key(k), v, 0, step) for k, v in values.items()])

    def alert(self, alert: Alert) -> None:
        self._client.set_tag(self.run_id, f"hookscope.alert.{self._alerts}", str(alert))
        self._alerts += 1

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


class WandbSink:
    """A W&B run (``wandb.init(mode=...)``) of the project ``hookscope``."""

    def __init__(self, mode: str, name: str) -> None:
        self._wandb = require("wandb")
        settings = self._wandb.Settings(console="off", x_disable_stats=True, silent=True)
        self._run = self._wandb.init(project=EXPERIMENT, name=name, mode=mode, settings=settings, reinit="create_new")

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        self._run.log(dict(values), step=step)

    def alert(self, alert: Alert) -> None:
        level = self._wandb.AlertLevel.ERROR if alert.kind == "non_finite" else self._wandb.AlertLevel.WARN
        self._run.alert(title=alert_title(alert), text=alert.message, level=level)

    def close(self) -> None:
        self._run.finish()


def _mlflow_key(key: str) -> str:
    """MLflow keys take letters, digits and ``_-./ :``; anything else becomes ``_``."""
    return "".join(c if c.isalnum() or c in "_-./ :" else "_" for c in key)


def _board(where: str, name: str) -> Board:
    return Board(where)


_OPENERS: dict[str, Any] = {
    "object": lambda sink, name: sink,
    "tensorboard": _board,
    "trackio": TrackioSink,
    "mlflow": MlflowSink,
    "wandb": WandbSink,
}
