"""The store a ``watch(out=...)`` writes: refused if it exists (unless ``force``), rewritten whole.

``WatchStore(out, force=...)`` checks the path before anything is touched (``check``), creates the
store with its manifest when the block is entered (``open``) and writes the histories and alerts
again on each flush and at exit (``write``, through ``store.series.write_watch``).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from ..errors import OutputExistsError, StoreError
from ..store.format import new_manifest
from ..store.save import provenance
from ..store.series import Alert, History, write_watch


class WatchStore:
    """The watch's store at ``out`` (an absolute path); ``written`` is when it was last written."""

    def __init__(self, out: str | os.PathLike[str], *, force: bool) -> None:
        self.out = Path(os.path.abspath(out))
        self.force = force
        self.manifest: dict[str, Any] = {}
        self.written = -float("inf")

    def check(self) -> None:
        """Refuse an existing output unless ``force``: before the block touches anything."""
        if self.out.exists() and not self.force:
            raise OutputExistsError(f"{self.out} already exists; pass force=True to replace it, or pick another path")

    def open(self, model: nn.Module, config: dict[str, Any], sites: list[dict[str, Any]]) -> None:
        """Create the store (replacing an old one under ``force``) with its manifest."""
        if self.out.exists():
            shutil.rmtree(self.out) if self.out.is_dir() else self.out.unlink()
        try:
            self.out.mkdir(parents=True)
        except OSError as err:
            raise StoreError(f"cannot write the store {self.out}: {err.strerror or err}") from err
        self.manifest = new_manifest(provenance(model), config, sites)

    def write(self, histories: dict[str, History], alerts: list[Alert], *, status: str, extra: dict[str, Any],
              scalars: dict[str, Tensor] | None = None) -> None:  # fmt: skip
        """Write the manifest (its config updated with ``extra``), histories, alerts and scalars."""
        config = {**self.manifest["config"], **extra}
        manifest = {**self.manifest, "status": status, "config": config}
        write_watch(self.out, manifest, histories, alerts, scalars)
        self.written = time.monotonic()
