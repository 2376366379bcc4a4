"""One tiny Llama and one in-process vLLM engine for the whole session (loading one takes seconds)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hookscope

from .tiny import in_process_llm, needs_vllm, save_tiny

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    needs_vllm()
    return save_tiny(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def llm(tiny: Path, engines: dict[str, subprocess.Popen[str]]) -> Iterator[Any]:
    engine = in_process_llm(tiny)
    yield engine
    del engine


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """vLLM's venv pins an older torch and transformers whose lazy imports warn (torch.jit.script_method,
    torch.distributed.reduce_op): those are not hookscope's, so here they are not errors. hookscope's own
    warnings (HookscopeWarning) stay errors."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning"))
            item.add_marker(pytest.mark.filterwarnings("ignore::FutureWarning"))


@pytest.fixture(scope="session")
def engines(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """The compiled engine, the multiprocess one, the tensor-parallel one, docs/guide/serving.md's example and the
    one killed mid-store (``tests/serving/engines.py``), started once, side by side with the in-process tests; a
    test reads one with ``result(engines["compiled"])`` (the killed one's store: ``engines["killed"].args[-1]``)."""
    src = str(Path(hookscope.__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(ROOT)])}
    killed = tmp_path_factory.mktemp("killed") / "acts.hookscope"  # the store the killed engine writes
    folders = {"compiled": [tiny], "multiprocess": [tiny], "readme": [tmp_path_factory.mktemp("readme")],
               "killed": [tiny, killed], "parallel": [tiny]}  # fmt: skip
    started = {which: subprocess.Popen([sys.executable, "-m", "tests.serving.engines", which, *map(str, folder)],
                                       cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for which, folder in folders.items()}  # fmt: skip
    yield started
    for process in started.values():
        if process.poll() is None:
            process.kill()
        process.wait()
