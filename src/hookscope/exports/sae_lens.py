"""``export(store, out, format="datasets")``: a store as a Hugging Face ``datasets`` folder in SAE Lens's layout.

::

    hookscope.export("acts.hookscope", "acts-hf", format="datasets", select="blocks.3")
    datasets.load_from_disk("acts-hf")["blocks.3"]        # (context, d_in) per row, as SAE Lens caches them

One row per sequence (a row of a batch of the store), one column per selected site, named after it,
``Array2D(shape=(context, d_in))`` (the layout SAE Lens's ``CacheActivationsRunner`` writes and its
``ActivationsStore(cached_activations_path=...)`` reads), and ``token_ids`` (``Sequence(int32,
context)``) and ``attention_mask`` where the store kept them. Padding positions are written like the
others (the layout has no mask; ``attention_mask`` says which they are). The store's provenance
and config are in the dataset info (``description``, JSON). Batches are written one at a time with an
``ArrowWriter`` into files of about ``shard_size`` bytes, so memory holds one batch; the folder is
written beside ``out`` and renamed into place when complete, like ``save``. A row-layout store only:
a token-major store (``extract(..., layout="tokens")``) no longer has the sequences. A vLLM store
(``capture_llm(..., out=)``: a batch per request, its calls the prefill then one row per decode step)
is a row per request, its calls joined: ``Array2D(shape=(None, d_in))``, the requests' lengths as
they were (SAE Lens's cached layout needs one context length: read such a store with ``StoreDataset``).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..base.files import mark, move, new_output, staged_folder
from ..base.optional import require
from ..base.words import parse_size
from ..core.select import Selector
from ..errors import InputError, NotCapturedError, OptionError, StoreError, StoreWarning
from ..progress import Callback, Progress, callback
from ..store.columns import Column, columns, read_input, stepped
from ..store.format import SHARD_SIZE
from ..store.reader import Run, load
from ..store.shards import inside, one_line, read_index


def write(source: Any, out: str | os.PathLike[str], *, force: bool = False, select: Selector | None = None,
          kind: str = "output", key: str | None = None, shard_size: int | str = SHARD_SIZE,
          progress: Progress = None) -> Path:  # fmt: skip
    """Write the sites ``select`` picks (as ``core.store_sites.select_sites`` says; None: every site) of the store
    ``source`` (a path or a ``Run``) to ``out`` as an HF datasets folder; an existing ``out`` is replaced
    only with ``force``. ``progress`` (``hookscope.progress``; default quiet) hears ``("export", batches
    done, batches)``.

    ``kind`` and ``key``: what of each site (``key=None``: its first key); ``shard_size``: the bytes of each
    ``.arrow`` file (an int or ``"256MB"``), the store's default (``store.format.SHARD_SIZE``)."""
    run = source if isinstance(source, Run) else load(_store_path(source))
    if run.config.get("layout") == "tokens":
        raise OptionError(f"{run.path} is token-major: its sequences are gone; export a store written with "
                          "extract(..., layout='rows') (the default)")  # fmt: skip
    picked = columns(run, select, kind, key, "rows", True)
    root = new_output(out, force=force, kind="export")
    kept = _inputs(run)
    features = _features(picked, kept, ragged=stepped(run))
    with staged_folder(root, lambda err, folder: StoreError(f"cannot write {root}: {err} ({folder})")) as staging:
        files = _write_rows(picked, kept, features, staging, parse_size(shard_size), callback(progress))
        _write_state(run, features, staging, files)
        mark(staging, "export")
    return root


def _store_path(source: Any) -> str | os.PathLike[str]:
    if not isinstance(source, (str, os.PathLike)):
        raise InputError(f"format='datasets' exports a store (a path or hookscope.load(...)), got "
                          f"{type(source).__name__}")  # fmt: skip
    return source


def _features(picked: list[Column], kept: dict[int, dict[str, Tensor]], *, ragged: bool) -> Any:
    """One ``Array2D(context, d_in)`` per site; ``token_ids`` / ``attention_mask`` where the store has them.
    ``ragged``: a row per vLLM request, ``(None, d_in)``: each its own length."""
    datasets = require("datasets")
    found: dict[str, Any] = {}
    for column in picked:
        where = next(iter(column.places.values()))[0]
        shape, dtype = where[3], where[2]
        if ragged and len(shape) == 2:
            found[column.site] = datasets.Array2D(shape=(None, shape[1]), dtype=_arrow_dtype(dtype))
            continue
        if len(shape) != 3:
            raise OptionError(f"format='datasets' writes (batch, context, d_in) activations; {column.site} "
                              f"{column.kind} is {tuple(shape)}: select the sites of a sequence model")  # fmt: skip
        found[column.site] = datasets.Array2D(shape=tuple(shape[1:]), dtype=_arrow_dtype(dtype))
    context = -1 if ragged else found[picked[0].site].shape[0]
    inputs = kept.get(min(picked[0].places), {})
    if "input_ids" in inputs:
        found["token_ids"] = datasets.Sequence(datasets.Value("int32"), length=context)
    if "attention_mask" in inputs:
        found["attention_mask"] = datasets.Sequence(datasets.Value("int8"), length=context)
    return datasets.Features(found)


def _arrow_dtype(dtype: str) -> str:
    if dtype == "bfloat16":  # Arrow has no bfloat16
        warnings.warn("hookscope.exports.sae_lens: bfloat16 activations are written as float32 (Arrow has no "
                      "bfloat16)", StoreWarning, stacklevel=5)  # fmt: skip
        return "float32"
    return dtype


def _inputs(run: Run) -> dict[int, dict[str, Tensor]]:
    """The inputs the store kept (``input_ids``, ``attention_mask``), by batch then key; each shard's header
    read once, the tensors mapped (read when written out)."""
    found: dict[int, dict[str, Tensor]] = {}
    for shard in run.manifest.get("shards", []):
        header = {**read_index(inside(run.path, shard["file"])), "file": shard["file"]}
        for row in header["meta"].get("inputs", []):
            tensor = read_input(run, header, row["key"], row["batch"])
            if tensor is not None:
                found.setdefault(row["batch"], {})[row["key"]] = tensor
    return found


def _write_rows(picked: list[Column], kept: dict[int, dict[str, Tensor]], features: Any, staging: Path,
                shard_size: int, step: Callback) -> list[str]:  # fmt: skip
    """Every batch, one at a time, into ``data-*.arrow`` files of about ``shard_size`` bytes."""
    writer_class = require("datasets.arrow_writer").ArrowWriter
    files: list[str] = []
    writer, written = None, 0
    batches = sorted(set.intersection(*(set(c.places) for c in picked)))
    step("export", 0, len(batches))
    try:
        for done, batch in enumerate(batches, 1):
            if writer is None:
                files.append(f"part-{len(files):05d}.arrow")
                writer, written = writer_class(path=str(staging / files[-1]), features=features), 0
            values = _values(picked, kept.get(batch, {}), features, batch)
            writer.write_batch(values)
            written += sum(v.nbytes for v in values.values())
            if written >= shard_size:
                writer.finalize()
                writer = None
            step("export", done, len(batches))
        if writer is not None:
            writer.finalize()
    except OSError as err:
        raise StoreError(f"cannot write the datasets export: {one_line(err)}; free space or pick another out=") from err
    named = [f"data-{n:05d}-of-{len(files):05d}.arrow" for n in range(len(files))]
    for old, new in zip(files, named, strict=True):
        move(staging / old, staging / new)
    return named


def _values(picked: list[Column], inputs: dict[str, Tensor], features: Any, batch: int) -> dict[str, Any]:
    """Batch ``batch``'s columns as numpy arrays, checked against the features (one shape for every row)."""
    values = {}
    for column in picked:
        items = column.items(batch)
        if features[column.site].shape[0] is None:  # a vLLM request: one row, its tokens
            values[column.site] = _numpy(items[None], features[column.site].dtype)
            continue
        if tuple(items.shape[1:]) != features[column.site].shape:
            raise OptionError(f"batch {batch} of {column.site} is {tuple(items.shape)} where the first was (rows, "
                              f"{', '.join(map(str, features[column.site].shape))}); SAE Lens's layout needs one "
                              "context length: extract with a fixed sequence length (pad to it)")  # fmt: skip
        values[column.site] = _numpy(items, features[column.site].dtype)
    for name, key, dtype in (("token_ids", "input_ids", torch.int32), ("attention_mask", "attention_mask", torch.int8)):
        if name in features:
            if key not in inputs:
                raise NotCapturedError(f"batch {batch} has no {key} in the store where the first batch had them")
            values[name] = inputs[key].to(dtype).numpy()
    return values


def _numpy(tensor: Tensor, dtype: str) -> Any:
    return tensor.to(getattr(torch, dtype)).numpy() if str(tensor.dtype) != f"torch.{dtype}" else tensor.numpy()


def _write_state(run: Run, features: Any, staging: Path, files: list[str]) -> None:
    """``state.json`` and ``dataset_info.json`` as ``Dataset.save_to_disk`` writes them, provenance in the info."""
    datasets = require("datasets")
    made = {"hookscope_store": str(run.path), "provenance": run.provenance, "config": run.config}
    info = datasets.DatasetInfo(description=json.dumps(made), features=features)
    fingerprint = hashlib.sha256(json.dumps(made, sort_keys=True, default=str).encode()).hexdigest()[:16]
    state: dict[str, Any] = {"_data_files": [{"filename": f} for f in files], "_fingerprint": fingerprint,
                             "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
                             "_output_all_columns": False, "_split": None}  # fmt: skip
    (staging / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
    found = require("datasets.utils.py_utils").asdict(info)  # what save_to_disk writes
    info_json = {key: found[key] for key in sorted(found)}
    (staging / "dataset_info.json").write_text(json.dumps(info_json, indent=2), encoding="utf-8")
