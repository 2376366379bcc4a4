"""The registry of inline views: every public result class that mixes in Shows has a view."""

from __future__ import annotations

import hookscope
from hookscope.base import display
from hookscope.base.display import Shows


def has_view(cls: type) -> bool:
    """Whether a room registered an HTML view for ``cls`` (or a class it derives from): the registry read."""
    return any(k in display._HTML for k in cls.__mro__)


def test_every_public_result_that_shows_itself_has_a_view() -> None:
    showing = [getattr(hookscope, name) for name in hookscope.__all__]
    classes = [obj for obj in showing if isinstance(obj, type) and issubclass(obj, Shows)]
    core = {"Call", "Capture", "Record", "Report", "Run", "RunningStats", "Summary"}
    assert core <= {cls.__name__ for cls in classes}
    assert [cls.__name__ for cls in classes if not has_view(cls)] == []


def test_a_class_without_a_view_falls_back_to_its_repr() -> None:
    class Plain(Shows):
        pass

    assert not has_view(Plain)
    assert Plain()._repr_html_() is None and Plain()._repr_png_() is None
