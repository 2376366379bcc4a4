"""A tiny sequence model and padded token batches, for the tests of stores other tools read."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class TinyLM(nn.Module):
    """Embedding -> Linear: ``(B, T)`` token ids to ``(B, T, 4)`` and ``(B, T, 3)``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(11, 4)
        self.mlp = nn.Linear(4, 3)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        return self.mlp(self.embed(input_ids))


def token_batches(n: int = 4, rows: int = 2, length: int = 5) -> list[dict[str, Tensor]]:
    """``n`` dict batches of ``input_ids`` and an ``attention_mask`` whose first row is right-padded."""
    found = []
    for i in range(n):
        ids = torch.randint(0, 11, (rows, length), generator=torch.Generator().manual_seed(i))
        mask = torch.ones(rows, length, dtype=torch.long)
        mask[0, length - 1 - i % 3 :] = 0  # 1 to 3 padding tokens in the first row
        found.append({"input_ids": ids, "attention_mask": mask})
    return found


def expected(model: nn.Module, batches: list[dict[str, Tensor]], site: str, *, tokens: bool) -> Tensor:
    """The oracle: ``site``'s output on every batch, computed here, by rows or by tokens less padding."""
    module = dict(model.named_modules())[site]
    found = []
    with torch.no_grad():
        for batch in batches:
            x = model.embed(batch["input_ids"])
            out = x if module is model.embed else model.mlp(x)
            found.append(out[batch["attention_mask"].bool()] if tokens else out)
    return torch.cat(found)
