"""Labels that fit their box: a dotted name too wide for it has its leading parts cut to their initials
(``t.e.layers.0.self_attn``), any other text loses its middle (``Multihea…ention ▸ 3 modules``),
keeping its start and, longer, its end; the full name is the box's title (hover). Widths are
estimated from the characters (no font is measured here), on the wide side, so a label drawn in a
sans-serif font at its size stays inside its box.
"""

from __future__ import annotations

from collections.abc import Sequence

ELLIPSIS = "…"
# em per character, an upper bound from DejaVu Sans Bold (Linux's system-ui, among the widest faces)
EMS = {**dict.fromkeys("ijl.,:;!|' ", 0.36), **dict.fromkeys("fIJ-()[]{}tr_▸/", 0.52),
       **dict.fromkeys("mwMW", 1.1), **dict.fromkeys("#…%@", 1.0)}  # fmt: skip
EM_LOWER, EM_DIGIT, EM_UPPER, EM_OTHER = 0.72, 0.7, 0.86, 1.0
REGULAR = 0.9  # a regular weight's width, of the bold's


def text_width(text: str, font_px: float, *, bold: bool = False) -> float:
    """The width ``text`` takes at ``font_px`` (bold, or regular), estimated on the wide side."""
    ems = 0.0
    for char in text:
        if char in EMS:
            ems += EMS[char]
        elif char.isascii() and char.islower():
            ems += EM_LOWER
        elif char.isascii() and char.isdigit():
            ems += EM_DIGIT
        else:
            ems += EM_UPPER if char.isascii() and char.isupper() else EM_OTHER
    return ems * font_px * (1.0 if bold else REGULAR)


def fitted(text: str, width: float, font_px: float, *, bold: bool = False, dotted: bool = True) -> str:
    """``text`` as it fits ``width`` px at ``font_px``: whole; else a dotted name with its leading parts cut to
    their initials (``transformer.encoder.layers.0.self_attn`` -> ``t.encoder.layers.0.self_attn`` ->
    ``t.e.layers.0.self_attn``: what tells boxes apart stays; not unless ``dotted``); else elided in the
    middle (a third of what is kept from its start, two thirds from its end)."""
    if text_width(text, font_px, bold=bold) <= width:
        return text
    parts = text.split(".") if dotted else [text]
    for cut in range(1, len(parts) - 1):
        shown = ".".join([*(p[:1] for p in parts[:cut]), *parts[cut:]])
        if text_width(shown, font_px, bold=bold) <= width:
            return shown
    keep = len(text) - 1
    while keep > 1:
        head = keep // 3
        shown = text[:head] + ELLIPSIS + text[len(text) - (keep - head) :]
        if text_width(shown, font_px, bold=bold) <= width:
            return shown
        keep -= 1
    return ELLIPSIS


def frame_labels(frames: Sequence[tuple[str, str, float, float, float]], font_px: float) -> dict[str, str]:
    """The label of each frame ``(name, type, x, y, width)``, outermost first: its name and type, fitted to
    its width. Frames nested inside one whose top is within a label's height of theirs (a container whose
    first box is its parent's) would write over its label: theirs join it instead, named from the frame
    before them that holds them (``encoder › layers.0 · TransformerEncoderLayer``), and get an empty label
    (each frame's title keeps its full name)."""
    labels: dict[str, str] = {}
    joined: dict[str, list[tuple[str, str]]] = {}
    for i, (name, type_, x, y, width) in enumerate(frames):
        host = next(
            (h for h, _, hx, hy, hw in frames[:i] if h in joined and abs(hy - y) < 2 * font_px
             and hx <= x + 0.5 and x + width <= hx + hw + 0.5),
            None,
        )  # fmt: skip
        if host is None:
            joined[name] = [(name, type_)]
        else:
            joined[host].append((name, type_))
            labels[name] = ""
    for host, chain in joined.items():
        width = next(w for n, _, _, _, w in frames if n == host)
        names = [chain[0][0]] + [_relative(n, [m for m, _ in chain[:i]]) for i, (n, _) in enumerate(chain[1:], 1)]
        labels[host] = fitted(" › ".join(names) + f" · {chain[-1][1]}", width - 12, font_px, dotted=False)
    return labels


def _relative(name: str, before: list[str]) -> str:
    """``name`` less the longest of ``before`` that holds it (``encoder.layers.0`` after ``encoder``: ``layers.0``)."""
    holders = [b for b in before if name.startswith(b + ".")]
    return name[len(max(holders, key=len)) + 1 :] if holders else name
