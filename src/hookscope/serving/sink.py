"""Each finished request of a vLLM capture, streamed to a store as one batch (``hookscope.store``).

The store is the one ``extract`` writes (``hookscope.store.format``): opened here, in the worker
that holds the records, and finished when the block ends; each request goes to the background
writer (``hookscope.store.shard_writer``) as soon as the engine stops scheduling it, as the next
batch, with the token ids it fed beside it (``input_ids``). Memory stays bounded by ``max_memory``
and a request handed over is on disk within ``flush_every`` seconds, so a killed run leaves a store
``load`` opens with every request finished before that bound.

The manifest's row of each batch says what it is (``run.manifest["batches"]``)::

    {"index": 7, "rows": 1, "request": "3", "prompt": 5, "tokens": 8,
     "calls": {"model.layers.0": 4, ...}, "prompt_sha256": "9f1c...", "call_rows": [5, 1, 1, 1]}

``request`` the id ``generate`` returned, ``prompt`` its prompt tokens (its first rows: call 0,
unless vLLM chunked the prefill), ``tokens`` every row of a site over its calls (the prompt, then
one per decode step), ``calls`` per site, ``prompt_sha256`` the digest of the prompt's token ids
(``prompt_digest``), ``call_rows`` the rows of each call. Each (site, kind, key) of a request is
stored as one tensor of its calls joined, ``(tokens, ...)``, one index row (``hookscope.store.joined``):
an index row per site and key, not per call; ``load`` splits it back into the calls by ``call_rows``.
A request whose sites' calls differ in rows (none does in vLLM) is stored call by call, without
``call_rows``. With ``resume`` the store is continued: batch numbers go on after the last
one there, and a request whose prompt the store already holds (from before, or written earlier in
this block) is not written again (``skipped``).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from ..base.words import parse_size
from ..core.records import Record
from ..core.select import Selector, selector_text
from ..store import format as store_format
from ..store.format import FLUSH_EVERY, MAX_MEMORY, SHARD_SIZE, SHARDS
from ..store.joined import CALL_ROWS, join_calls
from ..store.names import by_entry
from ..store.save import entries, provenance
from ..store.shard_writer import Pending, ShardWriter

PROMPT_SHA256 = "prompt_sha256"  # the field of a batch's manifest row: the digest of its prompt's ids


def prompt_digest(ids: Iterable[int]) -> str:
    """The SHA-256 of a prompt's token ids written as decimal text joined by spaces (``"1 5 6"``).

    Args:
        ids: the prompt's token ids.

    Returns:
        64 hexadecimal digits: what a batch's ``prompt_sha256`` holds.
    """
    return hashlib.sha256(" ".join(str(int(i)) for i in ids).encode()).hexdigest()


def held_prompts(batches: Iterable[Mapping[str, Any]]) -> set[str]:
    """The prompts a store holds, as ``prompt_digest`` writes them, from its manifest's ``batches`` rows.

    Args:
        batches: the rows (``run.manifest["batches"]``); rows written without a prompt are passed over.

    Returns:
        The digests.
    """
    return {b[PROMPT_SHA256] for b in batches if PROMPT_SHA256 in b}


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
        self.resume = bool(options.get("resume"))
        store_format.open_for_extract(self.root, header, resume=self.resume, force=bool(options.get("force")))
        held = store_format.index_parts(self.root)["batches"] if self.resume else []
        self.next = max((b["index"] for b in held), default=-1) + 1  # batch numbers go on after the store's
        self.held = held_prompts(held)  # prompts the store holds
        self.writer = ShardWriter(
            self.root / SHARDS, f"r0-{secrets.token_hex(4)}", rank=0,
            limit=parse_size(options.get("max_memory") or MAX_MEMORY),
            shard_size=parse_size(options.get("shard_size") or SHARD_SIZE),
            flush_every=options.get("flush_every", FLUSH_EVERY),
        )  # fmt: skip
        self.batches: dict[str, int] = {}  # request -> its batch in the store
        self.skipped: list[str] = []  # requests whose prompt the store already held (resume)

    def put(self, request: str, records: Mapping[str, Record], tokens: Tensor | None, prompt: int) -> None:
        """Hand request ``request``'s records (and the token ids it fed, ``prompt`` of them its prompt's) to the
        writer as the next batch; with ``resume``, a prompt the store held before is not written again."""
        facts: dict[str, Any] = {"request": request, "prompt": prompt, "tokens": _rows(records),
                                 "calls": {site: len(record.calls) for site, record in records.items()}}  # fmt: skip
        if tokens is not None:
            facts[PROMPT_SHA256] = digest = prompt_digest(tokens[:prompt].tolist())
            if self.resume and digest in self.held:
                self.skipped.append(request)
                return
            self.held.add(digest)  # resumed: the store holds each prompt once, this block's too
        index, self.next = self.next, self.next + 1
        self.batches[request] = index
        joined = join_calls(records)
        if joined is not None:  # one tensor per (site, kind, key), its calls' rows in the batch's row
            records, facts[CALL_ROWS] = joined
        listed, held, layouts = entries(records, index)
        named, tensors = by_entry(listed, held)
        inputs = {} if tokens is None else {"input_ids": tokens.reshape(1, -1)}
        nbytes = sum(t.nbytes for t in [*tensors.values(), *inputs.values()])
        self.writer.put(Pending(index, 1, named, tensors, nbytes, layouts, inputs, facts))

    def close(self, *, ok: bool) -> tuple[dict[str, int], list[str]]:
        """Write what is left and finish the store (``ok``), or keep what was written and let it go.

        Returns:
            request -> its batch in the store, and the requests not written (their prompt was there).
        """
        try:
            self.writer.close(raise_error=ok)
        finally:
            if ok:
                store_format.finish(self.root)
            else:
                store_format.release(self.root)
        return self.batches, self.skipped


def _rows(records: Mapping[str, Record]) -> int:
    """The rows of a request's first site over its calls (every site has the same: one per token fed)."""
    for record in records.values():
        return sum(next((len(t) for kind in call.tensors.values() for t in kind.values()), 0) for call in record.calls)
    return 0
