"""The public surface: what `import hookscope` exports, and the README's examples, run as written."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import hookscope

README = Path(__file__).resolve().parent.parent / "README.md"
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_exported_members() -> None:
    """__all__ is the contract later issues build on; changing it is a decision, not an accident."""
    assert hookscope.__all__ == [
        "KINDS",
        "Alert",
        "AmbiguousCallError",
        "Attention",
        "BlockError",
        "Call",
        "Capture",
        "CaptureError",
        "CaptureWarning",
        "CompiledWarning",
        "DamagedShardError",
        "Direction",
        "Directions",
        "Edit",
        "EditError",
        "EditWarning",
        "Evidence",
        "Faithfulness",
        "ForwardError",
        "GradientFlow",
        "Graph",
        "History",
        "HookInfo",
        "HookscopeError",
        "HookscopeWarning",
        "InputError",
        "Kind",
        "LLMCapture",
        "LLMEdit",
        "LinearAttention",
        "LogitLens",
        "MapScores",
        "MismatchError",
        "MissingDependencyError",
        "ModelError",
        "ModuleInfo",
        "NonFiniteError",
        "NonFiniteWarning",
        "NotCapturedError",
        "OptionError",
        "OutputExistsError",
        "PatchSweep",
        "Policy",
        "Probes",
        "Record",
        "Report",
        "RequestEdits",
        "Rollout",
        "Routing",
        "Run",
        "RunningStats",
        "SelectionError",
        "Selector",
        "ServingError",
        "ServingWarning",
        "ShapeError",
        "SteerSweep",
        "StoreDataset",
        "StoreError",
        "StoreStream",
        "StoreWarning",
        "Summary",
        "TargetError",
        "Thresholds",
        "TokenAttribution",
        "TopExamples",
        "Watch",
        "__version__",
        "attention",
        "attention_grid",
        "attention_rollout",
        "attribute",
        "build_report",
        "build_text_report",
        "build_training_report",
        "cam",
        "capture",
        "capture_llm",
        "compare",
        "directions",
        "edit",
        "edit_llm",
        "edits",
        "explain_prediction",
        "export",
        "extract",
        "faithfulness",
        "feature_grid",
        "find_hooks",
        "gradient_flow",
        "gradient_flow_plot",
        "histogram_plot",
        "linear_attention",
        "list_modules",
        "load",
        "logit_lens",
        "module_graph",
        "nan_guard",
        "overlay",
        "panel",
        "patch_sweep",
        "pick_layer",
        "probe",
        "render_html",
        "routing",
        "save",
        "select_modules",
        "show",
        "spatial_maps",
        "steer_sweep",
        "summarize",
        "token_attribution",
        "tokens_to_grid",
        "watch",
        "write_report",
        "zoo",
    ]
    assert hookscope.KINDS == ("input", "output", "grad_input", "grad_output", "param_grad")
    for name in hookscope.__all__:
        assert hasattr(hookscope, name), name


def test_exported_members_both_ways() -> None:
    """Every public attribute of ``hookscope`` is in ``__all__`` or is one of its own modules (httpx's check):
    nothing public leaks in from an import, and a module bound by importing it is that module."""
    public = {name for name in vars(hookscope) if not name.startswith("_") and name != "annotations"}
    leaked = [
        name
        for name in sorted(public - set(hookscope.__all__))
        if not (
            isinstance(getattr(hookscope, name), types.ModuleType)
            and getattr(hookscope, name).__name__ == f"hookscope.{name}"
        )
    ]
    assert leaked == []


def test_import_is_light() -> None:
    """`import hookscope` pulls in torch and the standard library only."""
    heavy = ("matplotlib", "PIL", "jinja2", "transformers", "torchvision", "captum", "sklearn", "safetensors")
    code = f"import sys, hookscope; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.fixture(scope="module")
def readme_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for all the README's blocks, as a reader running them top to bottom has."""
    return tmp_path_factory.mktemp("readme")


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"block{i}" for i in range(len(PYTHON_BLOCKS))])
def test_readme_examples_run(block: str, readme_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ```python block in README.md runs as written, without warnings, in order in ONE folder: no block
    trips over a file an earlier one wrote (a store that exists without force=True)."""
    monkeypatch.chdir(readme_folder)
    exec(compile(block, str(README), "exec"), {"__name__": "__main__"})


def test_readme_has_examples() -> None:
    assert len(PYTHON_BLOCKS) >= 15
