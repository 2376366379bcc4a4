"""The house: sub-packages import one way, never in a circle, never a private name, and re-export nothing."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

import hookscope
from hookscope.base.deprecation import MOVED

SRC = Path(hookscope.__file__).parent
# A module of a sub-package may import from its own sub-package, from a lower one, and from the leaves.
RANKS = {
    "base": 0,
    **{"core": 1, "zoo": 1, "stats": 2, "explain": 2, "viz": 3, "store": 3, "graph": 4, "compare": 4, "faithful": 4},
    **{"report": 5, "exports": 5, "edits": 6, "train": 6, "transformer": 6, "probes": 6},
    # steering, evidence bundles and the serving engine build on edits, probes, train and explain; the assistant's
    # tools (and their MCP server) read what those write; the command line sits on top of all of them
    **{"steer": 7, "evidence": 7, "serving": 7, "integrations": 8, "mcp": 8, "cli": 9},
}
LEAVES = {"errors", "_version", "reducers", "progress"}
# the curated API, the entry point, forwarding names
TOP = {"__init__", "__main__"}
# hookscope.cli:main, the public hookscope.zoo, the edit helpers of hookscope.edits, hookscope.compare's
# functions and hookscope.integrations' HookscopeCallback (loaded lazily) live in their __init__
CODE_INITS = {"cli", "zoo", "edits", "compare", "integrations"}


def _modules() -> dict[str, Path]:
    """Dotted name under hookscope (``core.capture``, ``errors``, ``zoo``) -> file."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module under hookscope, names, line) for every import of a hookscope module in ``path``."""
    package = name.split(".") if path.name == "__init__.py" and name != "__init__" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and node.module.split(".")[0] == "hookscope":
                target = node.module.removeprefix("hookscope").lstrip(".")
            else:
                continue
            found.append((target, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name.removeprefix("hookscope.").removeprefix("hookscope"), [], node.lineno)
                      for a in node.names if a.name.split(".")[0] == "hookscope"]  # fmt: skip
    return found


def _home(module: str) -> str:
    """The sub-package or leaf a dotted module name belongs to."""
    return module.split(".")[0]


MODULES = _modules()
# the assistant's map of the public API describes the top level, so it reads it (inside its function: the top is lazy)
READS_THE_API = {"mcp.api_map"}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_run_down_the_house(name: str) -> None:
    here = _home(name)
    wrong = []
    for target, names, line in _imports(name, MODULES[name]):
        for imported in _resolved(target, names):
            there = _home(imported)
            if name in TOP or there == here or there in LEAVES or (name in READS_THE_API and imported == ""):
                continue
            if here in RANKS and there in RANKS and RANKS[there] < RANKS[here]:
                continue
            wrong.append(f"line {line}: {name} imports {imported}")
    assert wrong == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_private_name_crosses_a_module(name: str) -> None:
    private = [
        f"line {line}: {n} from {target or 'hookscope'}"
        for target, names, line in _imports(name, MODULES[name])
        for n in names
        if n.startswith("_") and n != "__version__"
    ]
    assert private == []


def test_nothing_imports_the_command_line() -> None:
    importers = [
        name
        for name, path in MODULES.items()
        if _home(name) != "cli" and name != "__main__"
        for target, names, _ in _imports(name, path)
        if _home(target) == "cli" or (not target and "cli" in names)
    ]
    assert importers == []


@pytest.mark.parametrize("package", sorted(room for room in set(RANKS) - CODE_INITS if (SRC / room).is_dir()))
def test_sub_packages_re_export_nothing(package: str) -> None:
    """Their __init__ is a docstring: ``hookscope.core.capture`` is always the module, never a function."""
    tree = ast.parse((SRC / package / "__init__.py").read_text(encoding="utf-8"))
    assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant)


def test_no_import_circle() -> None:
    graph = {
        name: {t for target, names, _ in _imports(name, path) for t in _resolved(target, names)} & MODULES.keys()
        for name, path in MODULES.items()
    }
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str]:
        state[node] = 1
        for nxt in sorted(graph[node] - {node}):
            if state.get(nxt) == 1:
                return [*trail, node, nxt]
            if nxt not in state and (cycle := visit(nxt, [*trail, node])):
                return cycle
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            assert visit(start, []) == []


def _resolved(target: str, names: list[str]) -> list[str]:
    """What ``from target import names`` imports: the modules among the names, else ``target`` itself."""
    joined = [".".join(filter(None, [target, n])) for n in names]
    return [j if j in MODULES else target for j in joined] or [target]


def _a_public_name(module: types.ModuleType) -> str:
    return next(
        n for n, v in vars(module).items() if not n.startswith("_") and getattr(v, "__module__", "") == module.__name__
    )


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_moved_modules_forward_with_a_warning_that_names_the_new_path(old: str, new: str) -> None:
    moved, target = importlib.import_module(old), importlib.import_module(new)
    name = _a_public_name(target)
    assert old.removeprefix("hookscope.").replace(".", "/") + ".py" not in {
        str(p.relative_to(SRC)) for p in MODULES.values()
    }
    with pytest.warns(DeprecationWarning, match=rf"{re.escape(old)} moved to {re.escape(new)}"):
        assert getattr(moved, name) is getattr(target, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a name the new module does not define: no warning, an AttributeError
        with pytest.raises(AttributeError, match=re.escape(new)):
            moved.not_a_name
        assert not hasattr(moved, "Tensor")  # imported there, not defined there: pickle's probes stay quiet


def test_moved_paths_are_not_in_sys_modules_until_imported() -> None:
    """torch.compile pickles graphs, and pickle probes every module in sys.modules: a forwarder must not be
    there unless someone imported the old path."""
    code = "import sys, hookscope; print(sorted(m for m in sys.modules if m in hookscope.base.deprecation.MOVED))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_public_modules_the_readme_shows_are_modules() -> None:
    """No function shadows a module: ``hookscope.zoo`` and ``hookscope.reducers`` are modules, and each
    sub-package's modules are reachable by their dotted names."""
    assert isinstance(hookscope.zoo, types.ModuleType)
    assert isinstance(importlib.import_module("hookscope.reducers"), types.ModuleType)
    assert isinstance(importlib.import_module("hookscope.core.capture"), types.ModuleType)
    assert importlib.import_module("hookscope.core.capture").Capture is hookscope.Capture


def test_no_public_name_shadows_a_module() -> None:
    """``hookscope.X`` for X in ``__all__`` is what ``import hookscope.X`` gives: a name is a module
    (``zoo``, ``edits``) or a function/class that no sub-package or module of hookscope shares."""
    submodules = {name.split(".")[0] for name in MODULES if name != "__init__"}
    shadows = [
        name
        for name in hookscope.__all__
        if name in submodules and not isinstance(getattr(hookscope, name), types.ModuleType)
    ]
    assert shadows == []
    for name in sorted(submodules & set(hookscope.__all__)):
        assert importlib.import_module(f"hookscope.{name}") is getattr(hookscope, name)


def test_the_edit_helpers_are_the_edits_package() -> None:
    import hookscope.edits.ops

    assert hookscope.edits.ops.zero is hookscope.edits.zero
    assert callable(hookscope.edit) and not isinstance(hookscope.edit, types.ModuleType)


ROLE_NAMES = {"__init__", "__main__", "views", "page", "result"}  # the same job in every room (__main__: python -m)
LOW_RESULTS = {"report.inline", "viz.charts"}  # the faces of results that sit below their drawing (report/inline.py)
# store/history.History is read by store.reader.Run.history(); moving it up to train/ would close a circle
FACE_ELSEWHERE = {"History": "train.views"}


def test_one_module_name_one_meaning() -> None:
    """A module name used in two rooms must be a role name (``views.py``: a room's faces, ``page.py``: its page)."""
    rooms: dict[str, set[str]] = {}
    for path in MODULES.values():
        rooms.setdefault(path.stem, set()).add(str(path.parent.relative_to(SRC)))
    twins = {stem: sorted(where) for stem, where in rooms.items() if len(where) > 1 and stem not in ROLE_NAMES}
    assert twins == {}


def test_the_top_level_is_the_api_and_the_rooms() -> None:
    """Loose modules at the top: the curated API, the entry point, the version and the public leaves only."""
    loose = sorted(p.stem for p in SRC.glob("*.py"))
    assert loose == ["__init__", "__main__", "_version", "errors", "progress", "reducers"]


def test_a_result_registers_its_face_in_its_own_room() -> None:
    """``shows_as(Cls)`` sits in the room that defines ``Cls``, or among the faces of the low results."""
    defined = {
        node.name: name
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    }
    wrong, seen = [], 0
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            called = node.func if isinstance(node, ast.Call) else None
            if getattr(called, "attr", getattr(called, "id", "")) != "shows_as":
                continue
            assert isinstance(node, ast.Call) and isinstance(node.args[0], ast.Name), f"{name}: shows_as(a class name)"
            seen += 1
            cls_name = node.args[0].id
            home = _home(defined[cls_name])
            if home != _home(name) and name not in LOW_RESULTS and FACE_ELSEWHERE.get(cls_name) != name:
                wrong.append(f"{name} registers the face of {cls_name} (defined in {defined[cls_name]})")
    assert wrong == []
    assert seen >= 20


def test_report_draws_no_capability() -> None:
    """The page engine turns any result into a section through the display registry: it imports no room above it."""
    above = {room for room, rank in RANKS.items() if rank > RANKS["report"]}
    found = [
        f"{name} imports {target}"
        for name, path in MODULES.items()
        if _home(name) == "report"
        for target, names, _ in _imports(name, path)
        for imported in _resolved(target, names)
        if _home(imported) in above
    ]
    assert found == []


MAX_MODULE_LINES = 350  # and 60 lines of code a function
OVER_FOR_NOW: set[str] = set()  # modules allowed over the limit while they are split (none today)


def _docstring_lines(node: ast.AST) -> int:
    """The lines of the docstring that opens a module, class or function body (0 without one)."""
    body = getattr(node, "body", None)
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return (first.end_lineno or first.lineno) - first.lineno + 1
    return 0


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines, its docstring left out (Args:/Returns: sections may be long)."""
    return (node.end_lineno or node.lineno) - node.lineno + 1 - _docstring_lines(node)


def _module_lines(text: str, tree: ast.Module) -> int:
    """A module's lines, its docstrings left out (module, classes and functions): the API pages' Args:,
    Returns: and Raises: sections (tests/test_docstrings.py) do not count against its size."""
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return len(text.splitlines()) - sum(_docstring_lines(n) for n in ast.walk(tree) if isinstance(n, documented))


def test_modules_read_in_one_sitting() -> None:
    """No module over 350 lines, no function over 60 lines of code (STYLE.md: split where a piece has its own name);
    docstrings are not counted."""
    long_modules, long_functions = [], []
    for name, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        if _module_lines(text, tree) > MAX_MODULE_LINES and name not in OVER_FOR_NOW:
            long_modules.append(f"{name}: {_module_lines(text, tree)} lines")
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        long_functions += [f"{name}.{n.name}: {_code_lines(n)}" for n in functions if _code_lines(n) > 60]
    assert long_modules == []
    assert long_functions == []
