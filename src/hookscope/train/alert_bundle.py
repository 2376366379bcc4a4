"""``watch(..., evidence=DIR)`` and ``nan_guard(..., evidence=DIR)``: the first thing that went wrong, as a bundle.

The bundle (``hookscope.evidence.alert.v1``; its schema ships in ``hookscope/evidence/schemas/alert.v1.json`` and
``hookscope.evidence.bundle.validate_bundle`` checks it) holds ``manifest.json``, written last, and:

- ``state.pt``: the model's ``state_dict`` when it went wrong (for a forward or backward finding of ``nan_guard``:
  the weights the failing pass ran with; ``torch.load(..., weights_only=True)`` reads it);
- ``batch.pt`` (``nan_guard``): the failing pass's inputs ``(args, kwargs)``, tensors only, on the CPU;
- ``grad.pt`` (``nan_guard``, a backward finding): the gradient the loss sent back into the model's output (when
  the model returns one tensor);
- ``reproduce.py`` (``nan_guard``, a forward or backward finding, with ``factory="module:function"``): rebuilds the
  model with the user's own code (``function()`` must return it, untrained), loads ``state.pt``, runs ``batch.pt``
  through it inside ``nan_guard`` at the same step (and ``grad.pt`` back through it): ``python reproduce.py`` raises
  the same ``NonFiniteError``. Without a factory, or for an optimizer finding (the optimizer is the user's code,
  which a bundle cannot hold), the manifest's ``reproducer.why`` says so.

With ``nan_guard(evidence=)`` the inputs of each pass of the model, and the gradient at its output, are copied to
the CPU (one copy of the batch and of the output per step: the price of ``batch.pt`` and ``grad.pt``). Only the first
alert or finding is written (the first thing that went wrong; what follows is often its consequence); the later
ones are in ``w.alerts`` / ``guard.findings`` and the watch's store. ``DIR`` is checked when the block is made
(``base.files.new_output``: an existing folder is refused) and written whole or absent (``base.files.staged_folder``).
This module sits in ``train`` (floor 6), below ``evidence`` (floor 7), so it writes the manifest without reading
the schema; the tests validate what it writes.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib
import io
import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from .._version import __version__
from ..base.files import mark, new_output, staged_folder, write_atomically
from ..errors import HookscopeWarning, NonFiniteError, OptionError, StoreError
from ..store.history import COLUMNS, Alert
from ..store.save import weights_hash
from .producer import Check, Finding

ALERT = "hookscope.evidence.alert.v1"
ROWS = 5  # logged rows of the alerting module the bundle keeps
SCRIPT = '''"""Re-raise the finding of this bundle: python reproduce.py (hookscope {version} wrote it)."""
import sys
from pathlib import Path

import torch

import hookscope

HERE = Path(__file__).resolve().parent
sys.path.insert(0, {root!r})  # where the factory's module was imported from
from {module} import {function} as factory

model = factory()
model.load_state_dict(torch.load(HERE / "state.pt", weights_only=True))
model.train({training!r})
args, kwargs = torch.load(HERE / "batch.pt", weights_only=True)
with hookscope.nan_guard(model, select={select}, allow={allow}) as guard:
    for _ in range({step}):
        guard.step()  # the step the finding was made at
    out = model(*args, **kwargs)
{backward}'''

BACKWARD = '    out.backward(torch.load(HERE / "grad.pt", weights_only=True))  # what the loss sent back\n'


def check_factory(factory: str | None) -> tuple[str, str] | None:
    """``"module:function"`` split, or None; an ``OptionError`` for any other spelling."""
    if factory is None:
        return None
    module, _, function = factory.partition(":")
    if not module or not function.isidentifier() or not all(p.isidentifier() for p in module.split(".")):
        raise OptionError(f"factory= is 'module:function' (a function that returns the model), got {factory!r}")
    return module, function


def evidence_of(out: str | os.PathLike[str] | None, factory: str | None, source: str,
                replay: dict[str, Any] | None = None) -> AlertEvidence | None:  # fmt: skip
    """The bundle writer of ``evidence=out`` (None without one); ``factory`` needs ``out``."""
    if out is None:
        if factory is not None:
            raise OptionError("factory= rebuilds the model in an evidence bundle's reproducer; pass evidence=DIR too")
        return None
    return AlertEvidence(out, factory, source, replay)


class AlertEvidence:
    """What a bundle needs, kept while a block runs (only with ``evidence=``), and its writer.

    Args:
        out: the bundle's folder; refused when it exists.
        factory: ``"module:function"`` that rebuilds the model, for the reproducer; None writes none.
        source: ``watch`` or ``nan_guard``.
        replay: ``nan_guard``'s ``select`` and ``allow``, which the reproducer repeats; None for a watch.
    """

    def __init__(self, out: str | os.PathLike[str], factory: str | None, source: str,
                 replay: dict[str, Any] | None = None) -> None:  # fmt: skip
        self.out = new_output(out, force=False, kind="evidence")
        self.factory, self.source = check_factory(factory), source
        self.replay = {k: _literal(v) for k, v in (replay or {}).items()}  # repr() of each, or None when it has none
        self.ranges: dict[int, dict[str, Any]] = {}  # id(NonFiniteError) -> its producer's ranges
        self.batch: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self.training = True
        self.grad: Tensor | None = None  # the gradient at the model's output of the pass (grad.pt)
        self.written: str | None = None  # what was written: "step 3, output at '2'"
        self.later = 0  # alerts or findings after it, not written

    def keep_batch(self, model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """The inputs of the outermost pass starting now (detached copies of its tensors)."""
        self.batch = (tuple(_copied(a) for a in args), {k: _copied(v) for k, v in kwargs.items()})
        self.training, self.grad = model.training, None

    def keep_grad(self, grad: Tensor) -> None:
        """The gradient the loss sent back into the model's output in this pass (a backward finding replays it)."""
        self.grad = grad.detach().cpu().clone()

    def write_finding(self, err: NonFiniteError, model: nn.Module, optimizers: Sequence[Optimizer]) -> None:
        """The bundle of ``nan_guard``'s finding ``err`` (the first one only)."""
        ranges = self.ranges.get(id(err)) or {
            "inputs": [],
            "outputs": [],
            "why": "found on another rank: this rank did not read its tensors",
        }
        self.write(finding_of(err), model, optimizers, rows=[], ranges=ranges)

    def write_alert(self, alert: Alert, watched: Any, optimizers: Sequence[Optimizer]) -> None:
        """The bundle of a ``Watch``'s first alert, with the module's last logged rows (``COLUMNS`` each)."""
        bounds = watched.thresholds
        thresholds = {**vars(bounds), "update_ratio": list(bounds.update_ratio)}
        rows = watched.history(alert.module).rows.tolist()
        finding = {
            "module": alert.module, "kind": alert.kind, "step": alert.step, "phase": "logged", "rank": None,
            "message": str(alert), "thresholds": thresholds,
            "numbers": {"column": alert.column, "value": number(alert.value), "bound": number(alert.bound)},
        }  # fmt: skip
        last = [{c: int(v) if c == "step" else number(v) for c, v in zip(COLUMNS, row, strict=True)}
                for row in rows[-ROWS:]]  # fmt: skip
        why = "watch keeps statistics, not tensors: last_rows has the output's mean, std, mean |x| and zero fraction"
        self.write(finding, watched.model, optimizers, rows=last, ranges={"inputs": [], "outputs": [], "why": why})

    def write(self, finding: dict[str, Any], model: nn.Module, optimizers: Sequence[Optimizer], *,
              rows: list[dict[str, Any]], ranges: dict[str, Any]) -> None:  # fmt: skip
        """Write the bundle of ``finding`` (the manifest's ``finding``), once; later calls count what is left out."""
        if self.written is not None:
            self.later += 1
            return
        self.written = f"step {finding['step']}, {finding['kind']} at {finding['module']!r}"
        state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        reproducer = self._reproducer(finding, model, optimizers)
        files = [f for f in ("state.pt", reproducer["batch"], reproducer["grad"], reproducer["script"]) if f]
        manifest = {
            "schema": ALERT, "schema_version": 1, "hookscope": __version__, "created": _now(), "source": self.source,
            "finding": finding, "last_rows": rows, "ranges": ranges, "reproducer": reproducer, "files": files,
        }  # fmt: skip
        cannot = lambda err, folder: StoreError(f"cannot write the evidence bundle in {folder}: {err}")  # noqa: E731
        try:
            with staged_folder(self.out, cannot, parents=True) as staging:
                self._fill(staging, manifest, state)
        except StoreError as err:  # the finding itself is what the user must see: the bundle's failure warns
            warnings.warn(f"{err}; nothing was written there, the {self.source} goes on as without evidence=",
                          HookscopeWarning, stacklevel=2)  # fmt: skip

    def _fill(self, staging: Path, manifest: dict[str, Any], state: dict[str, Tensor]) -> None:
        """The files, then the manifest, then the marker."""
        torch.save(state, staging / "state.pt")
        reproducer = manifest["reproducer"]
        if reproducer["batch"]:
            torch.save(self.batch, staging / "batch.pt")
        if reproducer["grad"]:
            torch.save(self.grad, staging / "grad.pt")
        if reproducer["script"]:
            (staging / "reproduce.py").write_text(self._script(manifest["finding"]), encoding="utf-8")
        text = json.dumps(manifest, indent=1) + "\n"
        write_atomically(staging / "manifest.json", lambda tmp: tmp.write_text(text, encoding="utf-8"))
        mark(staging, "evidence")

    def _reproducer(self, finding: dict[str, Any], model: nn.Module, optimizers: Sequence[Optimizer]) -> dict[str, Any]:
        why = ""
        if self.source == "watch":
            why = "a watch alert is a trend over logged steps, not one pass: state.pt is the model when it fired"
        elif finding["phase"] == "optimizer" or (finding["phase"] == "backward" and self.grad is None):
            why = (
                f"a {finding['phase']} finding needs the loop's optimizer or a gradient at the model's one "
                "output tensor, which the bundle does not hold: state.pt and batch.pt are the pass that made it"
            )
        elif self.factory is None:
            why = "no factory= was given: pass factory='module:function' (a function returning the model) for a script"
        elif None in self.replay.values():
            why = "select= or allow= is a type or a function, which a script cannot repeat: pass names or globs"
        batch = self.source == "nan_guard" and self.batch is not None
        return {
            "seed": torch.initial_seed(), "batch_index": finding["step"], "weights_sha256": weights_hash(model),
            "optimizer_sha256": _optimizer_hash(optimizers), "state": "state.pt",
            "batch": "batch.pt" if batch else None,
            "grad": "grad.pt" if batch and finding["phase"] == "backward" and self.grad is not None else None,
            "factory": None if self.factory is None else ":".join(self.factory),
            "script": "reproduce.py" if batch and not why else None, "why": why,
        }  # fmt: skip

    def _script(self, finding: dict[str, Any]) -> str:
        assert self.factory is not None
        module, function = self.factory
        imported = importlib.import_module(module)
        root = Path(str(imported.__file__)).resolve().parents[module.count(".")]
        backward = BACKWARD if finding["phase"] == "backward" else ""
        return SCRIPT.format(version=__version__, root=str(root), module=module, function=function,
                             training=self.training, step=finding["step"], select=self.replay["select"],
                             allow=self.replay["allow"], backward=backward)  # fmt: skip


def finding_of(err: NonFiniteError) -> dict[str, Any]:
    """The manifest's ``finding`` of a ``NonFiniteError``."""
    numbers = {"value": err.value, "key": err.key, "call": err.call, "count": err.count, "numel": err.numel,
               "input_absmax": None if err.input_absmax is None else number(err.input_absmax)}  # fmt: skip
    return {"module": err.module, "kind": err.kind, "step": err.step, "phase": err.phase, "rank": err.rank,
            "message": str(err), "numbers": numbers, "thresholds": None}  # fmt: skip


def ranges_of(finding: Finding) -> dict[str, Any]:
    """The producer's input and output ranges: what it received and what it made (forward: its outputs; backward:
    the gradient it sent back)."""
    made = finding.site.outputs if finding.phase == "forward" else [finding.check]
    return {"inputs": [_range(c) for c in finding.before], "outputs": [_range(c) for c in made],
            "why": "" if finding.before else "the data or the loss: no module received it"}  # fmt: skip


def _range(check: Check) -> dict[str, Any]:
    """Min and max of the finite elements (of the tensor itself while it is alive, else the guard's reading) and
    the counts of NaN and infinities (None when the tensor was gone)."""
    count, tensor = check.count(), check.reading.ref()
    low, high = check.low, check.high
    if tensor is not None and count is not None and count.numel > count.nan + count.posinf + count.neginf:
        with torch.no_grad():
            finite = tensor.detach()[torch.isfinite(tensor.detach())].double()
            low, high = float(finite.min()), float(finite.max())
    return {
        "key": check.key, "min": low if math.isfinite(low) else None, "max": high if math.isfinite(high) else None,
        "nan": None if count is None else count.nan, "inf": None if count is None else count.posinf + count.neginf,
    }  # fmt: skip


def number(value: float) -> float | str:
    """A float for JSON: NaN and infinities as ``nan``, ``inf``, ``-inf``."""
    value = float(value)
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _literal(value: Any) -> str | None:
    """``repr(value)`` for a selector a script can repeat (None, a name or glob, a list of them), else None."""
    names = value if isinstance(value, (list, tuple)) else [value]
    return repr(value) if value is None or all(isinstance(v, str) for v in names) else None


def _copied(value: Any) -> Any:
    return value.detach().cpu().clone() if isinstance(value, Tensor) else value


def _optimizer_hash(optimizers: Sequence[Optimizer]) -> str | None:
    if not optimizers:
        return None
    digest = hashlib.sha256()
    for optimizer in optimizers:
        buffer = io.BytesIO()
        torch.save(optimizer.state_dict(), buffer)
        digest.update(buffer.getvalue())
    return digest.hexdigest()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
