"""The shipped schemas and the one validation of a bundle (hookscope.evidence.bundle)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import hookscope
from hookscope.evidence import bundle

SCHEMAS = Path(bundle.__file__).parent / "schemas"


def _alert(folder: Path, **changed: object) -> Path:
    """A minimal alert bundle written by hand: a state file and an array the manifest lists."""
    folder.mkdir()
    np.save(folder / "ranges.npy", np.arange(3.0))
    (folder / "state.pt").write_bytes(b"state")
    manifest = {
        "schema": bundle.ALERT, "schema_version": 1, "hookscope": hookscope.__version__,
        "created": "2026-01-01T00:00:00Z", "source": "nan_guard", "files": ["ranges.npy", "state.pt"],
        "finding": {"module": "2", "kind": "output", "step": 3, "phase": "forward", "rank": None,
                    "message": "nan", "numbers": {"value": "nan", "count": 128}, "thresholds": None},
        "last_rows": [], "ranges": {"inputs": [], "outputs": [], "why": "not read"},
        "reproducer": {"seed": 0, "batch_index": 3, "weights_sha256": "0" * 64, "optimizer_sha256": None,
                       "state": "state.pt", "batch": None, "grad": None, "factory": None, "script": None,
                       "why": "no factory"},
    }  # fmt: skip
    manifest.update(changed)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.mark.parametrize("name", sorted(bundle.SCHEMAS))
def test_the_shipped_schemas_are_draft_2020_12_and_name_themselves(name: str) -> None:
    schema = bundle.load_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"] == {"const": name}
    assert schema["$id"].endswith(f"/{name}.json")


def test_the_schemas_ship_in_the_wheel() -> None:
    """hatch puts every file of src/hookscope that git does not ignore into the wheel."""
    files = sorted(p.name for p in SCHEMAS.iterdir())
    assert files == ["alert.v1.json", "prediction.v1.json"]
    ignored = subprocess.run(["git", "check-ignore", *map(str, SCHEMAS.iterdir())], capture_output=True, text=True)
    assert ignored.stdout == ""


def test_a_sound_bundle_has_no_problem_and_reads(tmp_path: Path) -> None:
    folder = _alert(tmp_path / "b")
    assert bundle.validate_bundle(folder) == []
    assert bundle.read_bundle(folder)["finding"]["module"] == "2"
    assert bundle.is_bundle(folder) and not bundle.is_bundle(tmp_path)


def test_each_problem_is_one_line_naming_where(tmp_path: Path) -> None:
    folder = _alert(tmp_path / "b", files=["ranges.npy", "state.pt", "gone.npy"], source="cron")
    problems = bundle.validate_bundle(folder)
    assert problems == ["at source: 'cron' is not one of ['watch', 'nan_guard']"]
    (folder / "manifest.json").write_text(
        json.dumps({**json.loads((folder / "manifest.json").read_text()), "source": "watch"})
    )
    (folder / "extra.txt").write_text("x")
    assert bundle.validate_bundle(folder) == [
        "gone.npy is listed in manifest.json but missing",
        "extra.txt is in the folder but not listed in manifest.json",
    ]
    with pytest.raises(hookscope.InputError, match=r"is not a sound evidence bundle: gone\.npy .*and 1 more"):
        bundle.read_bundle(folder)


def test_an_array_that_needs_pickle_is_a_problem(tmp_path: Path) -> None:
    folder = _alert(tmp_path / "b")
    np.save(folder / "ranges.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    [problem] = bundle.validate_bundle(folder)
    assert problem.startswith("ranges.npy does not load with allow_pickle=False")


def test_a_folder_without_manifest_or_schema(tmp_path: Path) -> None:
    assert bundle.validate_bundle(tmp_path) == [f"{tmp_path} has no manifest.json: it is not an evidence bundle "
                                                "(or its writer did not finish)"]  # fmt: skip
    (tmp_path / "manifest.json").write_text('{"schema": "x"}')
    assert "names schema 'x'" in bundle.validate_bundle(tmp_path)[0]
    with pytest.raises(hookscope.InputError, match="'nope' is not an evidence schema"):
        bundle.load_schema("nope")
