"""What a store's shards call their tensors: names a plain ``safetensors.safe_open`` user can read.

A tensor of a call is named ``{site}/{kind}/{key}/call{call}/b{batch}``, e.g.
``layer1.0.conv2/output/out/call0/b17``: the module, the kind (``hookscope.core.kinds``), the key of the
tensor inside the call's value, the call of the module within the batch, and the batch. An alias (one
tensor stored under several names) takes the name of its first entry. A token-major shard
(``extract(..., layout="tokens")``) holds each (site, kind, key, call) of several batches in one array,
``{site}/{kind}/{key}/call{call}/b{first}-{last}``; the inputs a store keeps (token ids, the attention
mask) are ``inputs/{key}/b{batch}`` (``inputs/{key}/b{first}-{last}`` token-major). Stores of format
version 1 named them ``b{batch}.{n}`` or ``t{n}``; only the manifest says what those hold, and they read as
before (``docs/guide/store-format.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

INPUTS = "inputs"  # the first part of the name of an input a store keeps (token ids, attention mask)


def tensor_name(entry: Mapping[str, Any], batches: str | None = None) -> str:
    """``site/kind/key/call0/b17`` for a manifest entry (``batches``: the ``b3-7`` of a token-major shard)."""
    held = batches if batches is not None else f"b{entry['batch']}"
    return f"{entry['site']}/{entry['kind']}/{entry['key']}/call{entry['call']}/{held}"


def input_name(key: str, batches: str) -> str:
    """``inputs/input_ids/b17``: an input of the batch (or batches) a shard holds."""
    return f"{INPUTS}/{key}/{batches}"


def span(first: int, last: int) -> str:
    """``b17`` for one batch, ``b3-7`` for the batches 3 to 7 of a token-major shard."""
    return f"b{first}" if first == last else f"b{first}-{last}"


def by_entry(
    listed: list[dict[str, Any]], tensors: Mapping[str, Tensor]
) -> tuple[list[dict[str, Any]], dict[str, Tensor]]:
    """``entries``' rows and tensors, each tensor named after the first entry that holds it."""
    new: dict[str, str] = {}
    for entry in listed:
        new.setdefault(entry["name"], tensor_name(entry))
    return [{**e, "name": new[e["name"]]} for e in listed], {new[k]: t for k, t in tensors.items()}
