"""Each finished request of a vLLM capture, streamed to a store as one batch (``hookscope.store``).

The store is the one ``extract`` writes (``hookscope.store.format``): opened here, in the worker
that holds the records, and finished when the block ends; each request goes to the background
writer (``hookscope.store.shard_writer``) as soon as the engine stops scheduling it, as batch ``k``
(the ``k``-th request to finish), with the token ids it fed beside it (``input_ids``). Memory stays
bounded by ``max_memory`` and a request handed over is on disk within ``flush_every`` seconds, so a
killed run leaves a store ``load`` opens with every request finished before that bound.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from ..base.words import parse_size
from ..core.records import Record
from ..core.select import Selector, selector_text
from ..store import format as store_format
from ..store.format import FLUSH_EVERY, MAX_MEMORY, SHARD_SIZE, SHARDS
from ..store.names import by_entry
from ..store.save import entries, provenance
from ..store.shard_writer import Pending, ShardWriter


class RequestSink:
    """The store of one capture block in one worker: ``put`` a finished request, ``close`` at the end."""

    def __init__(
        self, model: nn.Module, sites: list[tuple[str, nn.Module]], kinds: tuple[str, ...], select: Selector | None,
        options: Mapping[str, Any],
    ) -> None:  # fmt: skip
        self.root = Path(os.path.abspath(options["out"]))
        listed: list[dict[str, Any]] = [
            {"name": n, "type": type(m).__name__, "kinds": list(kinds), "params": [], "missing": {}, "channels": None}
            for n, m in sites
        ]
        config = {"source": "vllm", "select": selector_text(select), "kinds": list(kinds), "reduce": None,
                  "stats_only": False, "per_channel": None, "world_size": 1, "target": None}  # fmt: skip
        header = store_format.new_manifest(provenance(model), config, listed)
        store_format.open_for_extract(self.root, header, resume=False, force=bool(options.get("force")))
        self.writer = ShardWriter(
            self.root / SHARDS, f"r0-{secrets.token_hex(4)}", rank=0,
            limit=parse_size(options.get("max_memory") or MAX_MEMORY),
            shard_size=parse_size(options.get("shard_size") or SHARD_SIZE),
            flush_every=options.get("flush_every", FLUSH_EVERY),
        )  # fmt: skip
        self.batches: dict[str, int] = {}  # request -> its batch in the store

    def put(self, request: str, records: Mapping[str, Record], tokens: Tensor | None) -> None:
        """Hand request ``request``'s records (and the token ids it fed) to the writer as the next batch."""
        index = len(self.batches)
        self.batches[request] = index
        listed, held, layouts = entries(records, index)
        named, tensors = by_entry(listed, held)
        inputs = {} if tokens is None else {"input_ids": tokens.reshape(1, -1)}
        nbytes = sum(t.nbytes for t in [*tensors.values(), *inputs.values()])
        self.writer.put(Pending(index, 1, named, tensors, nbytes, layouts, inputs))

    def close(self, *, ok: bool) -> dict[str, int]:
        """Write what is left and finish the store (``ok``), or keep what was written and let it go.

        Returns:
            request -> its batch in the store.
        """
        try:
            self.writer.close(raise_error=ok)
        finally:
            if ok:
                store_format.finish(self.root)
            else:
                store_format.release(self.root)
        return self.batches
