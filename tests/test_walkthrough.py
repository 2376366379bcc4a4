"""examples/hooks_walkthrough.ipynb, executed in a real Jupyter kernel (nbclient + ipykernel): its
cells run, show hookscope's results inline (text/html, image/png) and print the seed numbers worked
out by hand in its text; the outputs stored in the file (what GitHub shows) are the ones its code
gives today. ``python -m tests.notebook examples/hooks_walkthrough.ipynb`` refreshes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.notebook import execute

NOTEBOOK = Path(__file__).resolve().parent.parent / "examples" / "hooks_walkthrough.ipynb"
SEEDS = (  # z = (x + y) * (x * y) at x=3, y=5; the tutorials' network of 9 and 18 maps; y = 2x + 1
    "x.grad = 55, y.grad = 39",
    "dz/da = 15, dz/db = 8",
    "conv1: 9 feature maps",
    "conv2: 18 feature maps",
    "register_backward_hook:      [1.0, 1.0, 1.0] <- wrong",
    "register_full_backward_hook: [2.0, 2.0, 2.0]",
    "hookscope grad_input:  [2.0, 2.0, 2.0]",
)


@pytest.fixture(scope="module")
def executed() -> Any:
    return execute(NOTEBOOK)


def code_cells(nb: Any) -> list[Any]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def printed(cell: Any) -> str:
    return "".join(out.text for out in cell.outputs if out.output_type == "stream" and out.name == "stdout")


def shown(cell: Any) -> list[str]:
    """The mime types of the cell's rich outputs, in order."""
    return [kind for out in cell.outputs if "data" in out for kind in sorted(out.data)]


def test_the_walkthrough_runs_and_shows_its_results_inline(executed: Any) -> None:
    cells = code_cells(executed)
    assert not [out for cell in cells for out in cell.outputs if out.output_type == "error"]
    text = "".join(printed(cell) for cell in cells)
    for seed in SEEDS:
        assert seed in text
    assert "True" in text and "False" not in text  # every hand-written hook agrees with hookscope
    views = [out.data["text/html"] for cell in cells for out in cell.outputs if "text/html" in out.get("data", {})]
    assert len(views) >= 4 and all(view.startswith('<div class="hookscope-view">') for view in views)
    assert any('<article class="card layer"' in view for view in views)  # hookscope.show(cap)
    pictures = [kind for cell in cells for kind in shown(cell) if kind == "image/png"]
    assert len(pictures) >= 4  # feature grids, a site's grids, the CAM


def test_the_stored_outputs_are_the_ones_the_code_gives(executed: Any) -> None:
    stored = code_cells(nbformat.read(NOTEBOOK, as_version=4))
    fresh = code_cells(executed)
    assert [cell.source for cell in stored] == [cell.source for cell in fresh]
    assert [cell.execution_count for cell in stored] == list(range(1, len(stored) + 1))
    assert [printed(cell) for cell in stored] == [printed(cell) for cell in fresh]
    assert [shown(cell) for cell in stored] == [shown(cell) for cell in fresh]
