"""The store a ``watch(out=...)`` writes: refused if it exists (unless ``force``), rewritten whole.

``WatchStore(out, force=...)`` checks the path before anything is touched (``check``), creates the
store with its manifest when the block is entered (``open``) and writes the histories and alerts
again on each flush and at exit (``write``, through ``store.series.write_watch``); a run that a
``NonFiniteError`` ended keeps it in the manifest (``non_finite``: ``store.series.non_finite_json``). Under torchrun
rank 0 alone writes it (``train.ranks``: it holds every rank's rows), after every rank checked it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from ..base.files import new_output
from ..errors import NonFiniteError
from ..store.format import new_manifest
from ..store.history import Alert, History
from ..store.save import provenance
from ..store.series import non_finite_json, write_watch
from .sites import owned_params


class WatchStore:
    """The watch's store at ``out`` (an absolute path); ``written`` is when it was last written."""

    def __init__(self, out: str | os.PathLike[str], *, force: bool) -> None:
        self.out = Path(os.path.abspath(out))
        self.force = force
        self.manifest: dict[str, Any] = {}
        self.written = -float("inf")

    def check(self) -> None:
        """Refuse an existing output unless ``force`` (``base.files.new_output``): before the block touches anything."""
        new_output(self.out, force=self.force, kind="store")

    def open(self, model: nn.Module, config: dict[str, Any], sites: list[tuple[str, nn.Module]],
             more: Mapping[str, str] | None = None) -> None:  # fmt: skip
        """Make the manifest (``sites``: the watched modules; ``more``: other series, name -> type, the experts
        of fused experts modules); the store itself is made whole by the first
        ``write`` (which replaces an old one under ``force``), so a watch whose first write fails leaves
        nothing behind."""
        owned = owned_params(sites)  # each parameter at the one site that owns it
        described = [{"name": n, "type": type(m).__name__, "kinds": [], "params": [p for p, _ in owned[n]]}
                     for n, m in sites]  # fmt: skip
        described += [{"name": n, "type": t, "kinds": [], "params": []} for n, t in (more or {}).items()]  # experts
        self.manifest = new_manifest(provenance(model), config, described)

    def write(self, histories: dict[str, History], alerts: list[Alert], *, status: str, extra: dict[str, Any],
              ranks: Sequence[Mapping[str, History]] = (),
              scalars: dict[str, Tensor] | None = None, non_finite: NonFiniteError | None = None) -> None:  # fmt: skip
        """Write the manifest (its config updated with ``extra``), histories, alerts and scalars; under torchrun
        (``ranks``: each rank's own histories, in rank order) those too, beside the merged ones. ``non_finite``:
        the error that ended the run, if one did."""
        config = {**self.manifest["config"], **extra}
        manifest = {**self.manifest, "status": status, "config": config}
        if non_finite is not None:
            manifest["non_finite"] = non_finite_json(non_finite)
        write_watch(self.out, manifest, histories, alerts, whole=self.written == -float("inf"), ranks=ranks,
                    scalars=scalars)  # fmt: skip
        self.written = time.monotonic()
