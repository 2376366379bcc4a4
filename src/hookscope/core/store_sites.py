"""A store's sites, picked by the selectors that pick a model's modules (``hookscope.core.select``).

A store holds site names, not modules: ``select_sites`` picks a store's (or a capture's) sites with the
same names, globs, ``re:`` and lists, and module types by class name; ``":experts"`` picks the sites of
single experts (``<experts>.<e>``, kept by a capture of ``":experts"``), ``"<glob>:experts"`` those below
the modules it names; ``":blocks"`` and predicates need the model. It is the one way ``probe``,
``directions``, ``StoreDataset``, ``StoreStream``, ``export`` and ``compare.cka`` read a store's sites.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from torch import nn

from ..base.words import closest
from ..errors import SelectionError
from .compiled import eager_selector, plain_name
from .experts import EXPERT, EXPERTS
from .select import BLOCKS, Selector, entries, is_pattern, name_matcher, one_selector_text, trivial_class


def select_sites(sites: Mapping[str, str], select: Selector | None, *, source: str) -> list[str]:
    """The sites of a store (or a capture) that ``select`` picks, in their order (None: every site).

    ``sites`` maps each site's name to its module's class name, what a store keeps of a module;
    ``source`` names it in errors (``"the store acts.hookscope"``). A name, a glob, ``re:`` and a list
    pick site names exactly as ``select_modules`` picks module names (trivial sites are left out of
    what a pattern matches unless they are all it matches; each entry of a list must match); a module
    type picks the sites of that class or a subclass, by class name. ``":experts"`` picks the sites of
    single experts (class ``Expert``, ``<experts>.<e>``: what a capture of ``":experts"`` keeps per expert),
    ``"<name or glob>:experts"`` those below the modules it names. ``":blocks"``, a module and a
    predicate need the model: a ``SelectionError`` says what to pass, as it does for a selector that
    matches no site.
    """
    if select is None:
        return list(sites)
    matched: set[str] = set()
    for single in entries(select):
        test = _site_matcher(single, sites, source)
        hits = [name for name, cls in sites.items() if test(name, cls)]
        if not hits:
            raise SelectionError(_no_site_message(single, sites, source))
        kept = [name for name in hits if not trivial_class(sites[name])] if is_pattern(single) else []
        matched |= set(kept or hits)
    return [name for name in sites if name in matched]


def _site_matcher(selector: Selector, sites: Mapping[str, str], source: str) -> Callable[[str, str], bool]:
    """One selector as a ``(site, class name) -> bool`` test; what needs the model is refused here."""
    if isinstance(selector, str) and selector.endswith(EXPERTS):
        return _expert_sites(selector.removesuffix(EXPERTS), sites)
    if isinstance(selector, str) and selector != BLOCKS:
        test = name_matcher(_site_text(selector, sites))
        return lambda name, _: test(name)
    if isinstance(selector, type) and issubclass(selector, nn.Module):
        names = {cls.__name__ for cls in _subclasses(selector)}
        return lambda _, cls: cls in names
    shown = ", ".join(repr(s) for s in list(sites)[:4]) + (", ..." if len(sites) > 4 else "")
    what = "':blocks' finds a model's blocks and" if selector == BLOCKS else f"{one_selector_text(selector)!r}"
    raise SelectionError(
        f"{what} needs the model, but {source} holds site names ({shown}); select its sites by name, "
        "glob, 're:<regex>' or module type, e.g. the names of the blocks it holds"
    )


def _site_text(selector: str, sites: Mapping[str, str]) -> str:
    """A name, glob or ``re:`` as the store's names are written: no ``_orig_mod.``, and no ``module.`` (a
    DataParallel / DDP / DeepSpeed model's) unless the store's names have it."""
    text = eager_selector(selector)
    if not text.startswith("re:") and not any(n == "module" or n.startswith("module.") for n in sites):
        text = plain_name(text)
    return text


def _expert_sites(within: str, sites: Mapping[str, str]) -> Callable[[str, str], bool]:
    """``":experts"`` on a store: the sites of single experts (class ``Expert``, named ``<experts>.<e>``), what a
    capture of ``":experts"`` keeps per expert; ``"<name or glob>:experts"``: those below the modules it names."""
    test = name_matcher(_site_text(within, sites)) if within else None

    def below(name: str) -> bool:
        parts = name.split(".")
        return test is None or any(test(".".join(parts[:i])) for i in range(1, len(parts)))

    return lambda name, cls: cls == EXPERT and below(name)


def _subclasses(cls: type[nn.Module]) -> list[type[nn.Module]]:
    """``cls`` and every subclass of it imported so far: what ``isinstance`` would accept."""
    return [cls, *(sub for child in cls.__subclasses__() for sub in _subclasses(child))]


def _no_site_message(selector: Selector, sites: Mapping[str, str], source: str) -> str:
    if isinstance(selector, type):
        classes = sorted(set(sites.values()))
        what, hint = f"type {selector.__name__}", f"; types present: {', '.join(classes[:8])}"
    elif isinstance(selector, str) and selector.endswith(EXPERTS):
        return (
            f"{selector!r} matched no expert site of {source}: none of its {len(sites)} sites is one expert's "
            f"(class {EXPERT}, named <experts>.<e>, what hookscope.capture(model, {EXPERTS!r}) keeps per expert)"
            f"{' below ' + repr(selector.removesuffix(EXPERTS)) if selector != EXPERTS else ''}; select the "
            "experts modules and their routers by name"
        )
    else:
        what = repr(selector)
        hint = closest(str(selector).removeprefix("re:").replace("*", "").replace("?", ""), list(sites))
    return (
        f"{what} matched no site of {source} ({len(sites)} sites{hint}). "
        "List them with list(hookscope.load(path)) or list(cap)."
    )
