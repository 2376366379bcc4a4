"""Any result as a section of a report page: ``build_report(model, x, sections=[...])``.

A result class says where its view goes on a page when its room registers it
(``display.shows_as(cls, section=lambda obj: (anchor, title))``); :func:`as_section` asks the
registry, so this module knows no capability and a new result needs no edit here.
"""

from __future__ import annotations

from ..base.display import section_of, sectioned
from ..errors import OptionError
from .content import Section


def as_section(item: object) -> Section:
    """What ``build_report(sections=...)`` draws for ``item``: a ``Section`` stays one; any result whose
    class registered a section (``PatchSweep``, ``Similarity``, ``Divergence``, ``Probes``, ``TopExamples``, ...)
    becomes its notebook view under its own heading.

    Raises:
        OptionError: ``item`` is neither a ``Section`` nor a result that can be one.
    """
    if isinstance(item, Section):
        return item
    found = section_of(item)
    if found is None:
        raise OptionError(
            f"a report section is a Section or a result that draws itself as one ({', '.join(sectioned())}), "
            f"got {type(item).__name__}"
        )
    anchor, title, html = found
    return Section(anchor, title, html)
