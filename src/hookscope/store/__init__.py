"""Captures on disk, and whole data sets streamed to them.

``format`` is the one description of a store on disk (names, manifest, resume, finish);
``shards`` reads and writes its safetensors files; ``save`` writes a capture; ``reader`` opens a
store (``Run``); ``extract`` streams a data set through ``shard_writer``, split across processes
by ``ranks``. This file re-exports nothing.
"""
