"""w.log's scalars in the store, and every sink read back by its tracker's own reader.

trackio: its local SQLite through ``trackio.sqlite_storage.SQLiteStorage``; MLflow: ``MlflowClient``
on a ``file:`` store; W&B: the offline run's ``.wandb`` records parsed with W&B's own protobuf
``Record``; TensorBoard: ``EventAccumulator``. Nothing reaches the network (offline modes).
"""

from __future__ import annotations

import os
import struct
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
from hookscope.train.sinks import parse


def _train(tmp: Path, sinks: list[str], *, steps: int = 5, out: Path | None = None) -> tuple[Any, list[float]]:
    """A 2-layer MLP trained ``steps`` steps with one layer exploding (an alert); its losses, as floats."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses = []
    with hookscope.watch(model, opt, every=2, sinks=sinks, out=out, thresholds={"exploding": 1e-3, "patience": 1}) as w:
        for _ in range(steps):
            loss = F.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 2, (8,)))
            w.log(loss=loss, lr=opt.param_groups[0]["lr"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return w, losses


def test_log_keeps_scalars_beside_the_statistics_in_the_store(tmp_path: Path) -> None:
    _, losses = _train(tmp_path, [], out=tmp_path / "run.hookscope")
    run = hookscope.load(tmp_path / "run.hookscope")
    assert run.scalars()["loss"] == [(i, pytest.approx(v, rel=1e-6)) for i, v in enumerate(losses)]
    assert run.scalars()["lr"] == [(i, 1e-3) for i in range(5)]
    assert run.history("0").steps == [0, 2, 4]  # the statistics as before


def test_log_refuses_what_is_not_a_scalar(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    with hookscope.watch(model) as w:
        with pytest.raises(hookscope.OptionError, match=r"shape \(2,\); log a reduction"):
            w.log(x=torch.zeros(2))
        with pytest.raises(hookscope.OptionError, match="got str"):
            w.log(x="1")


def test_a_bad_sink_is_refused_before_anything_opens() -> None:
    with pytest.raises(hookscope.OptionError, match="TOOL one of tensorboard, trackio, mlflow, wandb"):
        parse(["neptune:x"])
    with pytest.raises(hookscope.OptionError, match="'wandb:offline' or 'wandb:online'"):
        parse("wandb:somewhere")


def test_a_missing_tracker_names_its_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trackio", None)  # import trackio raises ImportError
    with (
        pytest.raises(hookscope.MissingDependencyError, match="pip install trackio"),
        hookscope.watch(nn.Linear(2, 2), sinks=["trackio:x"]),
    ):
        pass


def test_tensorboard_sink_gets_scalars_and_alerts(tmp_path: Path) -> None:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    w, losses = _train(tmp_path, [f"tensorboard:{tmp_path / 'tb'}"])
    events = accumulator.EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    loss = [(e.step, e.value) for e in events.Scalars("loss")]
    assert loss == [(i, pytest.approx(v, rel=1e-6)) for i, v in enumerate(losses)]
    assert [e.step for e in events.Scalars("0/grad_norm")] == [0, 2, 4]
    assert [e.value for e in events.Scalars("0/grad_norm")] == pytest.approx(w.history("0")["grad_norm"], rel=1e-6)
    texts = [v.decode() for e in events.Tensors("alerts/text_summary") for v in e.tensor_proto.string_val]
    assert w.alerts and texts == [str(a) for a in w.alerts]


def test_trackio_gets_scalars_and_alerts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    utils = pytest.importorskip("trackio.utils")
    storage = pytest.importorskip("trackio.sqlite_storage").SQLiteStorage
    monkeypatch.setattr(utils, "TRACKIO_DIR", tmp_path / "trackio")  # read when trackio was first imported
    project = f"hookscope-{tmp_path.name}"
    w, losses = _train(tmp_path, [f"trackio:{project}"])
    assert pytest.importorskip("trackio.context_vars").current_run.get() is None  # no finish again at exit
    (run,) = storage.get_runs(project)
    logs = storage.get_logs(project, run)
    assert [(r["step"], r["loss"]) for r in logs if "loss" in r] == [
        (i, pytest.approx(v)) for i, v in enumerate(losses)
    ]
    grads = [r["0/grad_norm"] for r in logs if "0/grad_norm" in r]
    assert grads == pytest.approx(w.history("0")["grad_norm"], rel=1e-6)
    alerts = storage.get_alerts(project, run)
    assert w.alerts and len(alerts) == len(w.alerts)
    found = sorted((a["level"], a["step"], a["title"], a["text"]) for a in alerts)
    made = sorted(("warn", a.step, f"hookscope: {a.kind} at {a.module} (step {a.step})", a.message) for a in w.alerts)
    assert found == made


def test_mlflow_gets_metrics_and_alerts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tracking = pytest.importorskip("mlflow.tracking")
    uri = (tmp_path / "mlruns").as_uri()
    with pytest.raises(hookscope.OptionError, match="MLFLOW_ALLOW_FILE_STORE=true"):
        _train(tmp_path, [f"mlflow:{uri}"])
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    w, losses = _train(tmp_path, [f"mlflow:{uri}"])
    client = tracking.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("hookscope").experiment_id])
    loss = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")]
    assert sorted(loss) == [(i, pytest.approx(v)) for i, v in enumerate(losses)]
    grads = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "0/grad_norm"))
    assert [v for _, v in grads] == pytest.approx(w.history("0")["grad_norm"], rel=1e-6)
    assert run.data.tags["hookscope.alert.0"] == str(w.alerts[0]) and run.info.status == "FINISHED"


def test_wandb_offline_gets_metrics_and_alerts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proto = pytest.importorskip("wandb.proto.wandb_internal_pb2")
    for name, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}.items():
        monkeypatch.setenv(name, value)
    w, losses = _train(tmp_path, ["wandb:offline"])
    (file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    history, alerts = [], []
    for record in _finished_run(file, proto):
        if record.WhichOneof("record_type") == "history":
            history.append({i.key or "/".join(i.nested_key): i.value_json for i in record.history.item})
        elif record.WhichOneof("record_type") == "alert":
            alerts.append(record.alert.title)
    loss = [(int(h["_step"]), float(h["loss"])) for h in history if "loss" in h]
    assert loss == [(i, pytest.approx(v, rel=1e-6)) for i, v in enumerate(losses)]
    grads = [float(h["0/grad_norm"]) for h in history if "0/grad_norm" in h]
    assert grads == pytest.approx(w.history("0")["grad_norm"], rel=1e-6)
    assert sorted(alerts) == sorted(f"hookscope: {a.kind} at {a.module} (step {a.step})" for a in w.alerts)


def _finished_run(file: Path, proto: Any) -> list[Any]:
    """The run's records once W&B's service wrote its ``exit`` record (it writes after ``finish`` returns)."""
    deadline = time.monotonic() + 60
    while True:
        records = []
        for data in _wandb_records(file.read_bytes()):
            records.append(proto.Record())
            records[-1].ParseFromString(data)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _wandb_records(data: bytes) -> list[bytes]:
    """The records of a ``.wandb`` file: a 7-byte header, then LevelDB-log chunks in 32 KiB blocks."""
    assert data[:4] == b":W&B"
    out, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        if pos + 7 + length > len(data):  # a chunk still being written
            break
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            out.append(pending)
            pending = b""
    return out


def test_the_trackers_of_the_tests_write_under_a_temporary_folder() -> None:
    """tests/conftest.py points W&B and trackio at one temporary folder (not ~/.cache/wandb, ~/.cache/huggingface)."""
    import tempfile

    variables = (
        "WANDB_DIR",
        "WANDB_CACHE_DIR",
        "WANDB_CONFIG_DIR",
        "WANDB_DATA_DIR",
        "WANDB_ARTIFACT_DIR",
        "TRACKIO_DIR",
    )
    for variable in variables:
        assert Path(os.environ[variable]).is_relative_to(tempfile.gettempdir()), variable
    if (utils := sys.modules.get("trackio.utils")) is not None:
        assert Path(utils.TRACKIO_DIR).is_relative_to(tempfile.gettempdir())
