"""The API reference, written at build time from ``hookscope.__all__`` (nothing generated is committed).

One page per room: ``api/<room>.rst`` holds an autodoc entry for each public name that lives in
that room (``hookscope._HOMES`` says where), and ``api/index.md`` lists every name with its first
line. The same walk as tests/test_docstrings.py decides what is public: ``hookscope.__all__`` and
the ``__all__`` (or the defined names) of ``edits``, ``compare``, ``reducers``, ``zoo``,
``progress`` and the framework callbacks. The error classes are documented on ``errors.md``.

Signatures name classes by their home module (``hookscope.core.capture.Capture``); the
``missing-reference`` handler sends such a name to its public entry (``hookscope.Capture``).
After the build, the API reference (signature and docstring of every public name) is appended to
``llms-full.txt`` so that file holds the reference as text, not as autodoc directives.
"""

from __future__ import annotations

import importlib
import inspect
import re
import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx

import hookscope
import hookscope.errors

ROOT = Path(__file__).resolve().parents[2]

# Rooms in reading order, with the page title of each.
ROOMS = {
    "core": "Capture and selection",
    "stats": "Summaries and statistics",
    "explain": "Explanations: CAMs and attributions",
    "viz": "Pictures",
    "store": "Stores: save, extract, load",
    "graph": "Module graphs",
    "compare": "Comparing models and stores",
    "faithful": "Faithfulness of a map",
    "report": "Reports",
    "exports": "Exports",
    "edits": "Edits and patching",
    "train": "Watching training",
    "transformer": "Transformers",
    "probes": "Probes and top examples",
    "steer": "Steering",
    "evidence": "Evidence of a prediction",
    "serving": "vLLM serving",
    "zoo": "Pretrained networks (zoo)",
    "reducers": "Reducers",
    "progress": "Progress",
    "integrations": "Framework callbacks",
}
# Sub-modules whose own public names are documented under their dotted path.
MODULES = [
    "hookscope.edits",
    "hookscope.compare",
    "hookscope.reducers",
    "hookscope.zoo",
    "hookscope.progress",
    "hookscope.integrations.trainer",
    "hookscope.integrations.lightning",
    "hookscope.integrations.accelerate",
]
SUBMODULES = {"compare", "edits", "zoo"}  # names of hookscope.__all__ that are modules
# Public names that are values, not functions or classes: what each is (a value has no docstring of its own).
VALUES = {
    "KINDS": "The built-in kinds, in table order: what ``kinds=`` of ``capture`` and ``extract`` takes.",
    "Kind": "The type of one kind, for type checkers.",
    "Selector": "What ``select=`` takes: a name or glob, a module, a module class, a predicate ``(name, module) -> "
    "bool``, or a list of them (``select_modules`` says what it picks).",
    "EDIT_KINDS": "What an edit can change: what a module receives, what it returns, the gradient of what it returns.",
}


def module_names(dotted: str) -> list[str]:
    """A module's public names: its ``__all__``, else the functions and classes it defines."""
    module = importlib.import_module(dotted)
    names = getattr(module, "__all__", None)
    if names is None:
        defined = vars(module).items()
        names = [n for n, o in defined if not n.startswith("_") and getattr(o, "__module__", "") == dotted]
    return list(names)


def entries() -> dict[str, list[str]]:
    """``room -> [dotted public name, ...]``, every public name but the error classes, in order."""
    pages: dict[str, list[str]] = {room: [] for room in ROOMS}
    homes = {n: home.split(".")[1] for home, names in hookscope._HOMES.items() for n in names.split()}
    for name in hookscope.__all__:
        if name in SUBMODULES or name.startswith("_") or hasattr(hookscope.errors, name):
            continue
        pages[homes[name]].append(f"hookscope.{name}")
    for dotted in MODULES:
        room = dotted.split(".")[1]
        pages[room] += [f"{dotted}.{n}" for n in module_names(dotted)]
    return {room: sorted(names, key=order) for room, names in pages.items() if names}


def order(dotted: str) -> int:
    """A room's verbs first, then its classes, then its values (a stable sort keeps ``__all__``'s order within)."""
    owner, _, name = dotted.rpartition(".")
    obj = getattr(importlib.import_module(owner), name)
    return 0 if inspect.isfunction(obj) else 1 if inspect.isclass(obj) else 2


def directive(dotted: str) -> str:
    """The autodoc directive that documents one public name."""
    owner, _, name = dotted.rpartition(".")
    obj = getattr(importlib.import_module(owner), name)
    if inspect.isclass(obj):
        members = ", ".join(own_members(obj))
        return f".. autoclass:: {dotted}\n" + (f"   :members: {members}\n" if members else "")
    if inspect.isfunction(obj):
        return f".. autofunction:: {dotted}\n"
    if name not in VALUES:
        raise ValueError(f"{dotted} is a value: say what it is in apipages.VALUES")
    value = " ".join(repr(obj).split())
    return f".. py:data:: {dotted}\n   :value: {value}\n\n   {VALUES[name]}\n"


def own_members(cls: type) -> list[str]:
    """The public methods and properties a class has from hookscope, its own or a hookscope base's
    (``Capture.plot`` comes from a mixin), not what it inherits from Python or torch."""
    found: dict[str, None] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("hookscope"):
            for name, attr in vars(klass).items():
                kinds = (property, classmethod, staticmethod)
                if not name.startswith("_") and (inspect.isfunction(attr) or isinstance(attr, kinds)):
                    found[name] = None
    return sorted(found, key=lambda n: list(vars(cls)).index(n) if n in vars(cls) else len(vars(cls)))


def first_line(dotted: str) -> str:
    """The first line of a name's docstring, for the index's table."""
    owner, _, name = dotted.rpartition(".")
    obj = getattr(importlib.import_module(owner), name)
    doc = (inspect.getdoc(obj) or "") if inspect.isclass(obj) or inspect.isfunction(obj) else VALUES[name]
    return doc.split("\n")[0].replace("|", "\\|")


def room_page(room: str, names: list[str]) -> str:
    """The reStructuredText of one room's page."""
    title = ROOMS[room]
    lines = [title, "=" * len(title), "", ".. Generated by docs/_ext/apipages.py from hookscope.__all__.", ""]
    return "\n".join(lines + [directive(d) for d in names])


def index_page(pages: dict[str, list[str]]) -> str:
    """The Markdown of api/index.md: every name with its first line, then the rooms' toctree."""
    lines = ["# API reference", "", "Every public name, one page per room (generated from `__all__`).", ""]
    lines += ["The error and warning classes are on [the error index](../errors.md).", ""]
    for room, names in pages.items():
        lines += [f"## {ROOMS[room]}", "", "| name | what it is |", "|---|---|"]
        lines += [f"| {{py:obj}}`{d.removeprefix('hookscope.')} <{d}>` | {first_line(d)} |" for d in names]
        lines.append("")
    lines += ["```{toctree}", ":hidden:", "", *pages, "```", ""]
    return "\n".join(lines)


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` unless the file holds it already (an unchanged page is not read again)."""
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def write_pages(app: Sphinx) -> None:
    """``builder-inited``: write docs/api/ from ``__all__``, removing pages of rooms that are gone."""
    folder = Path(app.srcdir) / "api"
    folder.mkdir(exist_ok=True)
    pages = entries()
    wanted = {f"{room}.rst" for room in pages} | {"index.md"}
    for stale in folder.iterdir():
        if stale.name not in wanted:
            stale.unlink()
    for room, names in pages.items():
        write_if_changed(folder / f"{room}.rst", room_page(room, names))
    write_if_changed(folder / "index.md", index_page(pages))


def public_home(app: Sphinx, env: Any, node: Any, contnode: Any) -> Any:
    """``missing-reference``: ``hookscope.core.capture.Capture`` -> the entry ``hookscope.Capture``."""
    target = node.get("reftarget", "")
    if (
        node.get("refdomain") == "py"
        and "." not in target
        and isinstance(getattr(hookscope.errors, target, None), type)
    ):
        target = f"hookscope.errors.{target}"  # ``Raises:`` names an error class by its short name
    if node.get("refdomain") != "py" or not target.startswith("hookscope."):
        return None
    owner, _, name = target.rpartition(".")
    try:
        obj = getattr(importlib.import_module(owner), name)
    except (ImportError, AttributeError):
        return None
    for public in (f"hookscope.{name}", *(f"{m}.{name}" for m in MODULES)):
        module, _, short = public.rpartition(".")
        if getattr(importlib.import_module(module), short, None) is obj and public != node["reftarget"]:
            node["reftarget"] = public
            domain = env.get_domain("py")
            return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], public, node, contnode)
    return None


# A quoted literal (kept as it is) or a ``~dotted.Name`` (shortened to ``Name``).
SHORTENED = re.compile(r"""('[^']*'|"[^"]*")|~(?:\w+\.)*(\w+)""")


def literal_tail(annotation: str) -> str:
    """``annotation`` with each ``~a.b.Name`` after its first ``Literal`` written ``Name``.

    Sphinx's Python domain (9.0, ``PyXrefMixin.make_xrefs``) writes everything after a ``Literal`` in a
    field's type as plain text, never resetting at the ``Literal``'s closing bracket (its fix of
    sphinx-doc/sphinx#9775), so autodoc's ``~collections.abc.Iterable`` there showed its ``~``.
    """
    start = annotation.find("Literal[")
    if start < 0:
        return annotation
    tail = SHORTENED.sub(lambda m: m.group(1) or m.group(2), annotation[start:])
    return annotation[:start] + tail


def short_types(app: Sphinx, domain: str, objtype: str, content: Any) -> None:
    """``object-description-transform``, after autodoc's typehints: the ``type``/``rtype`` fields' text through
    ``literal_tail`` (before Sphinx makes cross-references of it)."""
    if domain != "py":
        return
    for field in content.findall(nodes.field):
        name, body = field[0].astext(), field[1]
        if not (name.startswith("type ") or name == "rtype") or len(body) != 1:
            continue
        paragraph = body[0]
        if isinstance(paragraph, nodes.paragraph) and len(paragraph) == 1 and isinstance(paragraph[0], nodes.Text):
            text = paragraph.astext()
            if (shortened := literal_tail(text)) != text:
                paragraph[0] = nodes.Text(shortened)


def reference_text() -> str:
    """Every public name's signature and docstring as the ``api`` tool gives them (the end of llms-full.txt)."""
    from hookscope.mcp.api_map import api

    names = [n for n in hookscope.__all__ if not n.startswith("_")]
    return "\n".join(["", "# API reference", "", *("#" + api(name)[0].render() for name in names), ""])


def skills() -> list[Path]:
    """The assistants' skills (skills/*/SKILL.md), which live beside the site, not in it."""
    return sorted((ROOT / "skills").glob("*/SKILL.md"))


def skill_line(path: Path) -> str:
    """One skill as a line of llms.txt: its name, its path (in the repository and in the site), and its description."""
    text = path.read_text(encoding="utf-8")
    head = text.split("---", 2)[1] if text.startswith("---") else ""
    front = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in head.splitlines()) if v}
    name, where = front.get("name", path.parent.name), path.relative_to(ROOT).as_posix()
    return f"- [{name}]({where}): {front.get('description', '')}"


def append_reference(app: Sphinx, exception: BaseException | None) -> None:
    """``build-finished`` (after sphinx-llms-txt): the skills added to llms.txt (and copied beside it); the
    skills and the API reference to llms-full.txt."""
    out = Path(app.outdir)
    short, full = out / app.config.llms_txt_filename, out / app.config.llms_txt_full_filename
    if exception is not None or not short.is_file() or not full.is_file():
        return
    tools = [
        "", "## Tools for assistants", "",
        "- MCP server: `python -m hookscope.mcp` (`pip install 'hookscope[mcp]'`) serves read-only tools over "
        "stores, watch runs and evidence bundles; `hookscope tool` runs the same tools on the command line.",
        *(skill_line(s) for s in skills()), "",
    ]  # fmt: skip
    with short.open("a", encoding="utf-8") as stream:
        stream.write("\n".join(tools))
    for skill in skills():  # beside llms.txt, so that its links work in the built site too
        copy = out / skill.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(skill, copy)
    with full.open("a", encoding="utf-8") as stream:
        for skill in skills():
            stream.write(
                f"\n<!-- {skill.relative_to(ROOT).as_posix()} -->\n{skill.read_text(encoding='utf-8').strip()}\n"
            )
        stream.write(reference_text())


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the page writer, the reference resolver and the llms-full.txt appendix."""
    app.connect("builder-inited", write_pages)
    app.connect("missing-reference", public_home)
    app.connect("object-description-transform", short_types, priority=900)  # after autodoc's (500)
    app.connect("build-finished", append_reference, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
