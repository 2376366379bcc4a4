"""The HTML building blocks of inline views: escaped, self-contained, capped."""

from __future__ import annotations

import base64

from PIL import Image

from hookscope.viz import fragments as html


def test_table_escapes_cells_but_keeps_safe_ones() -> None:
    out = html.table(("name", "<th>"), [("<b>x</b>", html.Safe("<i>ok</i>")), ('a"b', 3)], numeric=[1])
    assert "&lt;b&gt;x&lt;/b&gt;" in out and "<b>" not in out
    assert "&lt;th&gt;" in out
    assert "<i>ok</i>" in out
    assert "a&quot;b" in out
    assert '<td class="hs-n">3</td>' in out


def test_image_tag_is_an_inline_png_of_the_image() -> None:
    picture = Image.new("RGB", (3, 2), (255, 0, 0))
    tag = html.image_tag(picture, alt='conv "1" <x>', width=40)
    uri = tag.split('src="')[1].split('"')[0]
    assert uri.startswith("data:image/png;base64,")
    decoded = base64.b64decode(uri.removeprefix("data:image/png;base64,"))
    assert decoded == html.png_bytes(picture)
    assert 'alt="conv &quot;1&quot; &lt;x&gt;"' in tag and 'width="40"' in tag


def test_more_counts_what_is_left_out() -> None:
    assert html.more(24, 30, "sites") == '<p class="hs-more">6 more sites not shown</p>'
    assert html.more(3, 3, "sites") == ""


def test_view_is_scoped_and_fetches_nothing() -> None:
    out = html.view(html.table(("a",), [("b",)]), title="<script>alert(1)</script>")
    assert out.startswith('<div class="hookscope-view"><style>')
    assert "<script" not in out and "&lt;script&gt;" in out
    assert "http" not in out and "//" not in out and "url(" not in out
    css_rules = [line for line in html.CSS.splitlines() if "{" in line and not line.startswith(("@media", "  --"))]
    assert all(".hookscope-view" in line for line in css_rules)
