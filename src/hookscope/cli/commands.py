"""The bodies of the ``hookscope`` subcommands: each takes the parsed arguments and returns the exit status.

``run_report`` (and ``report --from STORE``), ``run_cam``, and for stores ``run_capture``,
``run_extract``, ``run_info``. They call the public API only; the model and inputs are loaded as
the flags say by ``hookscope.cli.loading`` (the specs read by ``hookscope.cli.models``,
``hookscope.cli.inputs`` and, for ``extract``, ``hookscope.cli.datasets``). ``hookscope.cli.parser``
wires them to the command line, ``hookscope.cli.listing`` holds ``list``, ``hookscope.cli.demo``
holds ``demo``, and ``hookscope.cli.main()`` turns their errors into one line on stderr.

An exception from the model's own forward becomes a ``ForwardError`` that names the module it
came from (``hookscope.cli.forward_guard``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from .. import reducers
from ..base.files import write_atomically
from ..base.optional import PAGES, require, require_all
from ..errors import OptionError
from ..explain.cam import cam
from ..graph.trace import Tracer
from ..probes.views import top_sections
from ..report.build import build_report
from ..report.from_store import build_report_from_store
from ..report.html import write_report
from ..store.extract import extract
from ..store.reader import load
from ..store.save import save
from ..train.page import build_training_report
from ..viz.images import overlay, panel
from .ablate import ablation_sections
from .bundles import describe_bundle
from .captions import chosen_layer, in_flag_words, panel_labels, report_choices
from .datasets import input_dataset
from .forward_guard import ForwardGuard
from .inputs import LoadedInput
from .loading import inputs_from, model_from, one_input
from .meter import progress
from .one_pass import capture_once
from .outputs import check_file, check_folder, check_store, read_by
from .several import first_input
from .target_flag import flag_words
from .text_inputs import encode_texts, run_text_report


def run_report(args: argparse.Namespace) -> int:
    require_all(PAGES, needed_by="hookscope report")  # every missing package named at once, up front
    if args.store is not None:
        return _report_from_store(args)
    if args.model is None or not args.inputs:
        args.parser.error("report needs MODEL and INPUT..., or --from STORE")
    check_folder(args.out, force=args.force, inputs=read_by(args))
    loaded = model_from(args)
    if loaded.tokenizer is not None:  # a text model reads text: the text report
        return run_text_report(args, loaded)
    batch = inputs_from(args, args.inputs, loaded)  # several inputs: the first reported, the rest held (cli/several)
    with (
        first_input(loaded.model, batch, args.device) as (x, held),
        ForwardGuard(loaded.model, x, batch=batch),
        flag_words(args.target),
    ):
        notes = (*loaded.notes, _input_note(args.inputs, batch), *([held] if held else []))
        ablated = ablation_sections(
            args.ablate, loaded.model, x, labels=loaded.labels, top_k=_top_k(args), output=args.output
        )  # --ablate: cli/ablate.py
        report = build_report(
            loaded.model, x, select=args.select, grads=args.grads, kinds=args.kinds,
            pictures=batch.pictures,
            labels=loaded.labels, target=args.target, cam_methods=tuple(args.cam or ("gradcam",)), top_k=_top_k(args),
            title=_title(loaded.name, batch.names, len(x)), notes=notes, progress=progress,
            output=args.output, max_layers=args.max_layers, image_names=batch.names, sections=ablated,
            faithfulness=args.faithfulness,
        )  # fmt: skip
    for line in report_choices(report, args.target):
        print(line, file=sys.stderr)
    print(write_report(in_flag_words(report), args.out, force=args.force))
    return 0


def _title(model: str, names: Sequence[str], images: int) -> str:
    """``resnet18 on cat.jpg``, ``resnet18 on 5 images: a.jpg, b.jpg, c.jpg and 2 more``, ``... on batch.pt``."""
    if len(names) != images or images == 1:
        return f"{model} on {', '.join(names)}"
    shown = ", ".join(names[:3]) + (f" and {images - 3} more" if images > 3 else "")
    return f"{model} on {images} images: {shown}"


def _report_from_store(args: argparse.Namespace) -> int:
    if args.model is not None or args.inputs:
        args.parser.error("--from STORE reports a store: pass no MODEL or INPUT with it")
    if args.kinds:
        args.parser.error("--from STORE draws the kinds the store holds: pass no --kinds with it")
    check_folder(args.out, force=args.force, inputs=read_by(args))
    run = load(args.store)
    if run.histories():  # a store written by hookscope.watch: the training report
        print(write_report(build_training_report(run, max_layers=args.max_layers), args.out, force=args.force))
        return 0
    against = load(args.against) if args.against is not None else None
    tops = top_sections(run, against)
    report = build_report_from_store(run, batch=args.batch, max_layers=args.max_layers, sections=tops)
    print(write_report(report, args.out, force=args.force))
    return 0


def run_cam(args: argparse.Namespace) -> int:
    require_all(("PIL", "matplotlib", "numpy"), needed_by="hookscope cam")
    out = Path(args.out)
    check_file(out, force=args.force, inputs=read_by(args))
    image_format = _image_format(out)
    loaded = model_from(args)
    if loaded.tokenizer is not None:
        raise OptionError(f"cam draws heatmaps over images and {loaded.name} is a text model; for the tokens "
                          "behind its output use hookscope.token_attribution in Python, or `hookscope report "
                          f"{loaded.name} \"a sentence\"` for its attention")  # fmt: skip
    for note in loaded.notes:  # torchvision:NAME without --weights: random init, said before the picture
        print(f"hookscope: note: {note}", file=sys.stderr)
    batch = one_input(inputs_from(args, [args.image], loaded), "cam")
    x = batch.x.to(args.device)
    with ForwardGuard(loaded.model, x, batch=batch), flag_words(args.target):
        layer, call = chosen_layer(loaded.model, x, args.layer) if args.panel else (args.layer, None)
        heat = cam(loaded.model, x, args.method, args.target, select=layer, call=call, output=args.output,
                   batch_size=args.batch_size, progress=progress)[0].cpu()  # fmt: skip
    picture = batch.pictures[0] if batch.pictures else loaded.preprocess.show(batch.x[0])
    if args.panel:
        labels = panel_labels(args, loaded.model, x, str(layer), loaded.labels)
        drawn = panel(picture, heat, cmap=args.cmap, alpha=args.alpha, labels=labels)
    else:
        drawn = overlay(picture, heat, cmap=args.cmap, alpha=args.alpha)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, lambda tmp: drawn.save(tmp, format=image_format))
    print(out)
    return 0


def run_capture(args: argparse.Namespace) -> int:
    check_store(args.out, force=args.force, inputs=read_by(args))
    loaded = model_from(args)
    if loaded.tokenizer is not None:  # a text model reads sentences or a .txt file (cli/text_inputs)
        inputs: tuple[tuple[Any, ...], dict[str, Any]] = ((), dict(encode_texts(loaded, args.inputs, args.device)))
    else:
        batch = inputs_from(args, args.inputs, loaded)
        inputs = batch.feed(args.device)
    tracer = Tracer(loaded.model)  # the store keeps the module graph of the same pass, for its report
    guard = ForwardGuard(loaded.model, *inputs, batch=batch if loaded.tokenizer is None else None)
    with guard, flag_words(args.target):
        cap = capture_once(loaded.model, inputs, args.select, tuple(args.kinds), args.target, args.output, tracer)
    print(save(cap, args.out, force=args.force, graph=tracer.graph()).path)
    return 0


def run_extract(args: argparse.Namespace) -> int:
    if args.device.startswith("cuda") and ":" not in args.device and "LOCAL_RANK" in os.environ:
        args.device = f"cuda:{os.environ['LOCAL_RANK']}"  # torchrun: one GPU per rank
    if os.environ.get("RANK", "0") == "0":  # rank 0 makes the store; the others may find it already made
        check_store(args.out, force=args.force, resume=args.resume, inputs=read_by(args))
    loaded = model_from(args)
    if loaded.tokenizer is not None:
        raise OptionError(f"extract reads folders of images and {loaded.name} is a text model; use `hookscope "
                          "capture MODEL \"a sentence\" ...` for a few sentences, or hookscope.extract in Python "
                          "with a DataLoader of tokenized batches")  # fmt: skip
    preprocess = loaded.preprocess.with_overrides(size=args.size, mean=args.mean, std=args.std)
    loader = DataLoader(input_dataset(args.inputs, preprocess), batch_size=args.batch_size, num_workers=args.workers)
    try:
        run = extract(
            loaded.model, loader, out=args.out, select=args.select, kinds=tuple(args.kinds),
            max_memory=args.max_memory, reduce=_reduction(args.reduce, args.dtype), stats_only=args.stats_only,
            per_channel=args.per_channel, resume=args.resume, force=args.force, shard_size=args.shard_size,
            flush_every=args.flush_every, progress=not args.no_progress,  # the lines, with throughput
        )  # fmt: skip
    except KeyboardInterrupt:
        kept = len(load(args.out).batches) if os.path.isdir(args.out) else 0
        print(f"hookscope: interrupted; the store {args.out} keeps the {kept} batches finished before it: rerun "
              "the same command with --resume to continue it", file=sys.stderr)  # fmt: skip
        return 130
    if os.environ.get("RANK", "0") == "0":
        print(run.path)
    return 0


def _reduction(specs: Sequence[str], dtype: str | None) -> Any:
    """``--reduce`` and ``--dtype`` as one reducer (None for neither)."""
    chosen = []
    for spec in specs:
        name, _, number = spec.partition(":")
        if name == "spatial_mean" and not number:
            chosen.append(reducers.spatial_mean())
        elif name in ("first_rows", "top_channels") and number.isdigit():
            chosen.append(getattr(reducers, name)(int(number)))
        else:
            raise OptionError(f"unknown reduction {spec!r}; use spatial_mean, first_rows:N or top_channels:K")
    if dtype is not None:  # last, on what is kept; but before top_channels, whose indices must stay exact
        cast = reducers.cast(getattr(torch, dtype))
        chosen = [cast, *chosen] if any(s.startswith("top_channels") for s in specs) else [*chosen, cast]
    return reducers.chain(*chosen) if chosen else None


def run_info(args: argparse.Namespace) -> int:
    bundle = describe_bundle(args.store)
    if bundle is not None:  # an evidence bundle: what it found
        print(bundle)
        return 0
    run = load(args.store)
    run.check(verify=args.verify)
    print(run.describe())
    return 0


# -- helpers -----------------------------------------------------------------------------------
def _top_k(args: argparse.Namespace) -> int:
    return 5 if args.top_k is None else int(args.top_k)  # None: not given (a text model's report refuses it)


def _input_note(specs: Sequence[str], batch: LoadedInput) -> str:
    """What the input was, for the report's notes: random values, a tensor file, or the images by name."""
    if specs[0].startswith("random:"):
        return f"input: random values ({specs[0]}, torch.randn with seed 0)"
    if batch.pictures is None:
        return f"input: the tensor in {specs[0]}"
    shown = ", ".join(batch.names[:5]) + (f" and {len(batch.names) - 5} more" if len(batch.names) > 5 else "")
    return f"input: {len(batch.names)} image{'s' if len(batch.names) > 1 else ''}: {shown}"


def _image_format(out: Path) -> str:
    """The Pillow format ``out``'s suffix names (PNG without a suffix): the file is written under a
    temporary ``.tmp`` name, from which Pillow could not tell it."""
    if not out.suffix:
        return "PNG"
    known: dict[str, str] = require("PIL.Image").registered_extensions()  # {".png": "PNG", ".jpg": "JPEG", ...}
    if out.suffix.lower() not in known:
        raise OptionError(
            f"cannot write {str(out)!r}: Pillow knows no image format for the suffix {out.suffix!r}; use .png or .jpg"
        )
    return known[out.suffix.lower()]
