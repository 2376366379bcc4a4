"""The token-major layout of ``extract(..., layout="tokens")``, and the inputs a store keeps.

A language model's activations are ``(batch, tokens, features)``; a sparse autoencoder trains on
random tokens. With ``layout="tokens"`` each batch's tensors are flattened to ``(tokens, features)``
in the model's thread (padding left out where the batch has an ``attention_mask``; a ``(batch,
features)`` value keeps one token per row), and the writer joins the batches of a shard into one
array per (site, kind, key, call), ``site/output/out/call0/b3-7`` (``hookscope.store.names``), so
a random token is one index into a memory-mapped file. The shard's metadata says where each batch
lies in it: ``"spans": {name: [[batch, begin, end], ...]}``. Shards still hold whole batches, so
checksums, resume and the bound on what a killed run loses are those of the row layout. Joining
copies a shard's batches once more, so the writer gets two thirds of ``max_memory`` (shards of a third
at most): with the copy, memory stays within ``max_memory`` plus a batch, as in the row layout.

Inputs: a batch that is a dict with ``input_ids`` / ``attention_mask`` (``(batch, tokens)``), or a
2-D integer tensor (token ids), has them kept beside the activations, listed in the shard's
metadata under ``"inputs"`` (``[{"key", "batch", "name"}]``): as they are in the row layout, as
``token_ids`` (one per kept token) in the token layout. They are not sites: ``load`` leaves them out
of its records; ``StoreDataset`` reads the mask and ``export(..., format="datasets")`` the token ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from ..errors import OptionError
from .names import input_name, span, tensor_name

LAYOUTS = ("rows", "tokens")
INPUT_KEYS = ("input_ids", "attention_mask")


def check_layout(layout: str, stats_only: bool) -> str:
    """``layout`` once checked: one of ``LAYOUTS``, and not ``tokens`` for a statistics run."""
    if layout == "tokens" and stats_only:
        raise OptionError("layout='tokens' lays out tensors, and stats_only=True keeps none; pass one of them")
    if layout not in LAYOUTS:
        raise OptionError(
            f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}; 'rows' keeps each batch as "
            "the model produced it, 'tokens' one (tokens, features) array per site"
        )
    return layout


def batch_inputs(batch: Any) -> dict[str, Tensor]:
    """The token ids and attention mask of a batch, on the CPU ({} for a batch without them)."""
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)) and batch:
        batch = batch[0]
    if isinstance(batch, Tensor):
        found = {"input_ids": batch} if batch.dim() == 2 and not batch.is_floating_point() else {}
    elif isinstance(batch, Mapping):
        found = {k: v for k in INPUT_KEYS if isinstance(v := batch.get(k), Tensor) and v.dim() == 2}
    else:
        found = {}
    return {k: v.detach().cpu() for k, v in found.items()}


def as_tokens(
    listed: list[dict[str, Any]], tensors: Mapping[str, Tensor], inputs: Mapping[str, Tensor]
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Each tensor of a batch as ``(tokens, features)``, padding left out; the token ids the same way."""
    mask = inputs.get("attention_mask")
    keep = mask.reshape(-1) != 0 if mask is not None else None
    flat: dict[str, Tensor] = {}
    for entry in listed:
        tensor = tensors[entry["name"]]
        if tensor.dim() not in (2, 3):
            raise OptionError(
                f"layout='tokens' stores (batch, tokens, features) or (batch, features) values; {entry['site']} "
                f"{entry['kind']} {entry['key']} is {tuple(tensor.shape)}: use layout='rows', or select other sites"
            )
        flat[entry["name"]] = _flatten(tensor, keep)
    ids = inputs.get("input_ids")
    return flat, ({"token_ids": _flatten(ids.unsqueeze(-1), keep).squeeze(-1)} if ids is not None else {})


def _flatten(tensor: Tensor, keep: Tensor | None) -> Tensor:
    """``(B, T, D)`` -> ``(B*T, D)`` less the tokens ``keep`` drops (when it has one flag per token)."""
    if tensor.dim() == 2:
        return tensor
    flat = tensor.reshape(-1, tensor.shape[-1])
    return flat[keep] if keep is not None and keep.numel() == flat.shape[0] else flat


def join_rows(group: Sequence[Any]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """A row-layout shard: each batch's tensors as they are, and its inputs (``inputs/input_ids/b17``)."""
    tensors = {name: t for batch in group for name, t in batch.tensors.items()}
    inputs = []
    for batch in group:
        for key, tensor in batch.inputs.items():
            name = input_name(key, span(batch.index, batch.index))
            tensors[name] = tensor
            inputs.append({"key": key, "batch": batch.index, "name": name})
    return tensors, {"tensors": [e for b in group for e in b.entries], **({"inputs": inputs} if inputs else {})}


def join_tokens(group: Sequence[Any]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """A token-major shard: one array per (site, kind, key, call) and per input over the group's batches,
    and where each batch lies in it."""
    held = span(group[0].index, group[-1].index)
    pieces: dict[str, list[tuple[int, Tensor]]] = {}
    entries: list[dict[str, Any]] = []
    inputs: list[dict[str, Any]] = []
    for batch in group:
        for entry in batch.entries:
            name = tensor_name(entry, held)
            if name not in pieces:
                entries.append({**entry, "batch": group[0].index, "name": name, "layout": ""})
            pieces.setdefault(name, []).append((batch.index, batch.tensors[entry["name"]]))
        for key, tensor in batch.inputs.items():
            name = input_name(key, held)
            if name not in pieces:
                inputs.append({"key": key, "batch": group[0].index, "name": name})
            pieces.setdefault(name, []).append((batch.index, tensor))
    tensors, spans = {}, {}
    for name, parts in pieces.items():
        tensors[name] = torch.cat([t for _, t in parts])
        ends = torch.tensor([len(t) for _, t in parts]).cumsum(0).tolist()
        spans[name] = [[b, end - len(t), end] for (b, t), end in zip(parts, ends, strict=True)]
    return tensors, {"tensors": entries, "inputs": inputs, "spans": spans, "layout": "tokens"}
