"""Execute a notebook in a real Jupyter kernel of this Python (the .venv's), touching nothing in $HOME.

::

    nb = execute(Path("examples/hooks_walkthrough.ipynb"))   # an nbformat NotebookNode, outputs filled
    python -m tests.notebook examples/hooks_walkthrough.ipynb  # execute it and store its outputs in the file

The kernel is ipykernel started by ``sys.executable`` through a kernelspec written to a temporary
folder, which ``JUPYTER_PATH`` puts first; Jupyter's runtime, config and data folders and
IPython's profile live there too, so a user's kernels and settings are neither read nor changed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

KERNEL = "hookscope-test-python"  # the temporary kernelspec's name
TIMEOUT = 120  # seconds a cell may run


@contextmanager
def private_kernel() -> Iterator[str]:
    """A kernelspec for this interpreter in a temporary Jupyter home; yields its name."""
    with tempfile.TemporaryDirectory(prefix="hookscope-jupyter-") as home:
        spec = Path(home, "data", "kernels", KERNEL)
        spec.mkdir(parents=True)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        spec.joinpath("kernel.json").write_text(
            json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"})
        )
        env = {
            "JUPYTER_PATH": str(Path(home, "data")),
            "JUPYTER_DATA_DIR": str(Path(home, "data")),
            "JUPYTER_RUNTIME_DIR": str(Path(home, "runtime")),
            "JUPYTER_CONFIG_DIR": str(Path(home, "config")),
            "JUPYTER_PLATFORM_DIRS": "1",
            "IPYTHONDIR": str(Path(home, "ipython")),
            "MPLCONFIGDIR": str(Path(home, "matplotlib")),
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        }
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            yield KERNEL
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def execute(path: Path, *, timeout: int = TIMEOUT) -> Any:
    """The notebook at ``path`` executed top to bottom in its own folder; raises on a failing cell."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    with private_kernel() as kernel:
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name=kernel,
            record_timing=False,
            resources={"metadata": {"path": str(path.parent)}},
        )
        client.execute()
    return nb


def main(argv: list[str]) -> int:
    """Execute each notebook named and write it back with its outputs (the kernelspec left as it was)."""
    import nbformat

    for name in argv:
        path = Path(name)
        spec = nbformat.read(path, as_version=4).metadata.get("kernelspec")
        nb = execute(path)
        if spec is not None:
            nb.metadata["kernelspec"] = spec
        nbformat.write(nb, path)
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
