"""The report's sections about probes: ``build_report(model, x, sections=[hookscope.probe(...)])``.

``probes_section`` lays the probes' plot (the metric by site, chance dashed) above their table,
the notebook view of ``Probes`` (``hookscope.probes.result.probes_html``), under its own heading.
"""

from __future__ import annotations

from ..probes.result import Probes, probes_html
from .views import Section


def probes_section(probes: Probes) -> Section:
    """Probes as a section of the page: anchor ``probes``."""
    return Section("probes", "Linear probes by site", str(probes_html(probes)))
