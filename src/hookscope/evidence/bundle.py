"""Read and validate an evidence bundle: the one check both kinds go through.

A bundle is a folder whose ``manifest.json`` names its schema (``"schema": "hookscope.evidence.prediction.v1"``
or ``"hookscope.evidence.alert.v1"``); the schemas ship in the package (``schemas/*.json``, read with
``importlib.resources``). ``validate_bundle(path)`` returns the problems, an empty list for a sound bundle:
the manifest against its schema (``jsonschema``, Draft 2020-12), every file it lists present, nothing in
the folder it does not list, and every ``.npy`` readable with ``numpy.load(..., allow_pickle=False)``.
``read_bundle(path)`` returns the manifest of a sound bundle, or raises one ``InputError`` line.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..base.files import MARKER
from ..base.optional import require
from ..errors import InputError

PREDICTION = "hookscope.evidence.prediction.v1"
ALERT = "hookscope.evidence.alert.v1"
SCHEMAS = {PREDICTION: "prediction.v1.json", ALERT: "alert.v1.json"}  # schema name -> file in schemas/
MANIFEST = "manifest.json"
SHOWN = 20  # problems listed before "and N more"


@cache
def load_schema(name: str) -> dict[str, Any]:
    """The JSON Schema shipped for a bundle kind.

    Args:
        name: ``hookscope.evidence.prediction.v1`` or ``hookscope.evidence.alert.v1``.

    Returns:
        The schema as a dict (the same object for each call: do not change it).

    Raises:
        InputError: ``name`` is not a schema hookscope ships.
    """
    if name not in SCHEMAS:
        raise InputError(f"{name!r} is not an evidence schema; hookscope ships {', '.join(SCHEMAS)}")
    text = resources.files(__package__).joinpath("schemas", SCHEMAS[name]).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def is_bundle(path: str | Path) -> bool:
    """Whether ``path`` is a folder whose manifest names an evidence schema (nothing else is checked).

    Args:
        path: a folder.

    Returns:
        True for an evidence bundle, sound or not.
    """
    manifest = _manifest(Path(path))
    return isinstance(manifest, dict) and manifest.get("schema") in SCHEMAS


def validate_bundle(path: str | Path) -> list[str]:
    """Every problem of the bundle at ``path``, one line each; ``[]`` when it is sound.

    Args:
        path: the bundle's folder.

    Returns:
        The problems: a missing or unreadable manifest, each schema violation (``at prediction.top_k: ...``),
        a listed file that is missing, a file that is not listed, an array that needs pickle to load.

    Raises:
        MissingDependencyError: ``jsonschema`` (or ``numpy``) is not installed.
    """
    folder = Path(path)
    manifest = _manifest(folder)
    if isinstance(manifest, str):
        return [manifest]
    name = manifest.get("schema")
    if name not in SCHEMAS:
        return [f"{folder / MANIFEST} names schema {name!r}, not one of {', '.join(SCHEMAS)}"]
    jsonschema = require("jsonschema")
    validator = jsonschema.Draft202012Validator(load_schema(name))
    problems = [f"at {_where(e.absolute_path)}: {e.message}" for e in validator.iter_errors(manifest)]
    if not problems:
        problems += _file_problems(folder, manifest)
    return problems[:SHOWN] + ([f"and {len(problems) - SHOWN} more"] if len(problems) > SHOWN else [])


def read_bundle(path: str | Path) -> dict[str, Any]:
    """The manifest of a sound bundle.

    Args:
        path: the bundle's folder.

    Returns:
        ``manifest.json`` as a dict (its ``schema`` says which kind).

    Raises:
        InputError: the folder is not a sound bundle (the first problem is named, with how many more).
        MissingDependencyError: ``jsonschema`` (or ``numpy``) is not installed.
    """
    problems = validate_bundle(path)
    if problems:
        more = f" (and {len(problems) - 1} more: hookscope.evidence.bundle.validate_bundle lists them)"
        raise InputError(f"{path} is not a sound evidence bundle: {problems[0]}" + more * (len(problems) > 1))
    manifest = _manifest(Path(path))
    assert isinstance(manifest, dict)
    return manifest


def _manifest(folder: Path) -> dict[str, Any] | str:
    """The manifest, or a line saying why it cannot be read."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{folder} has no {MANIFEST}: it is not an evidence bundle (or its writer did not finish)"
    except (OSError, ValueError) as err:
        return f"{folder / MANIFEST} cannot be read as JSON: {err}"
    return manifest if isinstance(manifest, dict) else f"{folder / MANIFEST} is not a JSON object"


def _where(path: Any) -> str:
    return ".".join(str(p) for p in path) or "the top"


def _file_problems(folder: Path, manifest: dict[str, Any]) -> list[str]:
    """Listed files missing, files not listed, arrays that need pickle."""
    listed = set(manifest["files"])
    found = {
        str(p.relative_to(folder).as_posix())
        for p in folder.rglob("*")
        if p.is_file() and p.name not in (MANIFEST, MARKER) and not _inside_store(p, folder, manifest)
    }
    store = manifest.get("store")
    if isinstance(store, str) and (folder / store / MANIFEST).is_file():
        found.add(store)  # the store is one entry: hookscope.load checks its own files
    problems = [f"{name} is listed in {MANIFEST} but missing" for name in sorted(listed - found)]
    problems += [f"{name} is in the folder but not listed in {MANIFEST}" for name in sorted(found - listed)]
    numpy = require("numpy")
    for name in sorted(listed & found):
        if name.endswith(".npy"):
            try:
                numpy.load(folder / name, allow_pickle=False)
            except (ValueError, OSError) as err:
                problems.append(f"{name} does not load with allow_pickle=False: {err}")
    return problems


def _inside_store(path: Path, folder: Path, manifest: dict[str, Any]) -> bool:
    """Whether ``path`` lies in the bundle's store (listed as one entry: ``hookscope.load`` checks the rest)."""
    store = manifest.get("store")
    return isinstance(store, str) and (folder / store) in path.parents
