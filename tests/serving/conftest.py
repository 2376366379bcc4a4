"""One tiny Llama and one in-process vLLM engine for the whole session (loading one takes seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .tiny import in_process_llm, needs_vllm, save_tiny


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    needs_vllm()
    return save_tiny(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def llm(tiny: Path) -> Iterator[Any]:
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
