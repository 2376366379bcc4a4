"""A tokenizer whose tokens are markup, for the escaping tests of the text views (captum#1226)."""

from __future__ import annotations

from collections.abc import Sequence

HOSTILE = "<img src=x onerror=alert(1)>"
VOCAB = [HOSTILE, "<script>alert(2)</script>", "a&b", '"quoted"', "$5", "##s", "Ġthe", "cat"] + [
    f"t{i}" for i in range(8, 50)
]


class HostileTokenizer:
    """Just what the text views read: ids to tokens."""

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [VOCAB[i] for i in ids]
