"""The public surface: what `import hookscope` exports, and the documentation's examples (README.md and every
docs/**/*.md page), run as written."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import hookscope
from tests import pages

BLOCKS = pages.runnable()


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
def page_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Path]:
    """One folder per page for all its blocks, as a reader running them top to bottom has."""
    return {page: tmp_path_factory.mktemp(page.stem) for page in pages.pages()}


@pytest.fixture(scope="module")
def page_names() -> dict[Path, dict[str, object]]:
    """One namespace per page: a block uses what the page's earlier blocks defined, as a reader's session has."""
    return {}


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_page_examples_run(
    block: pages.Block,
    page_folders: dict[Path, Path],
    page_names: dict[Path, dict[str, object]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every ```python block of README.md and of each docs/**/*.md page runs as written, without warnings, in
    order in ONE folder and namespace per page: no block trips over a file an earlier one wrote (a store that
    exists without force=True), and no page needs another page's variables. What a ``print(...)  # text``
    line claims is a line of what the block printed (``...`` stands for anything)."""
    monkeypatch.chdir(page_folders[block.page])
    names = page_names.setdefault(block.page, {"__name__": "__main__"})
    exec(compile(block.body, str(block.page), "exec"), names)
    if block == pages.python_blocks(block.page)[-1]:
        del page_names[block.page]  # the page is done: its models and tensors go
    printed = capsys.readouterr().out.splitlines()
    for claim in pages.claims(block):
        assert any(re.fullmatch(pages.as_pattern(claim), line) for line in printed), (claim, printed)


def test_the_pages_have_examples() -> None:
    """A quick start per main use in the README, the rest in the guide: no page's blocks went missing unseen."""
    assert len(pages.python_blocks(pages.README)) >= 6 and len(BLOCKS) >= 60


@pytest.mark.parametrize("page", pages.pages(), ids=pages.name)
def test_a_block_not_run_here_says_where_or_why(page: Path) -> None:
    """The fence rule: ```python alone runs here; a second word means it does not: ```python vllm runs under
    `make test-vllm`, ```python norun says why on its first line (`# not run: <reason>`)."""
    for block in pages.blocks(page):
        if block.lang == "python" and block.word:
            assert block.word in pages.NOT_RUN, f"{block.id}: ```python {block.word} is neither vllm nor norun"
            first = block.body.splitlines()[0] if block.body.strip() else ""
            assert block.word != "norun" or re.fullmatch(r"# not run: \S.*", first), f"{block.id}: {first!r}"
