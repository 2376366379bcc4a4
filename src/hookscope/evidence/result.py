"""``Evidence``: a bundle read back, a wrong prediction's or a training alert's (``manifest["schema"]`` says which).

``Evidence.read(path)`` validates the folder (``bundle.read_bundle``) and holds its manifest; ``.table()`` says
what it found in a few lines (what ``hookscope info`` prints), and on a report page it is a section of its own
(``views.py``). ``.array(file)`` loads one of its arrays with ``allow_pickle=False``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.display import Shows, table_of
from ..base.optional import require
from .bundle import ALERT, PREDICTION, read_bundle


@dataclass
class Evidence(Shows):
    """One evidence bundle: its folder and its manifest (``hookscope.evidence.prediction.v1`` or ``.alert.v1``).

    Attributes:
        path: the bundle's folder.
        manifest: ``manifest.json``, as a dict.
    """

    path: Path
    manifest: dict[str, Any]

    @classmethod
    def read(cls, path: str | Path) -> Evidence:
        """Open the bundle at ``path``, checked against its schema.

        Args:
            path: the bundle's folder.

        Returns:
            The bundle.

        Raises:
            InputError: the folder is not a sound evidence bundle (the first problem is named).
            MissingDependencyError: ``jsonschema`` or ``numpy`` is not installed.
        """
        return cls(Path(path), read_bundle(path))

    @property
    def kind(self) -> str:
        """``prediction`` or ``alert``."""
        return {PREDICTION: "prediction", ALERT: "alert"}[self.manifest["schema"]]

    def array(self, name: str) -> Any:
        """One array of the bundle, as numpy reads it with ``allow_pickle=False``.

        Args:
            name: its file name in the manifest (``"maps/contrastive@layer4.npy"``).

        Returns:
            The array (a ``numpy.ndarray``).

        Raises:
            MissingDependencyError: ``numpy`` is not installed.
        """
        return require("numpy").load(self.path / name, allow_pickle=False)

    def __repr__(self) -> str:
        return f"<Evidence ({self.kind}) at {self.path}>"

    def table(self) -> str:
        """What the bundle found, in a few lines of text (what ``hookscope info`` prints).

        Returns:
            The lines, as text.
        """
        return table_of(self)
