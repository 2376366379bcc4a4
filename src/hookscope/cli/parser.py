"""The ``hookscope`` command line as argparse sees it: every subcommand, its arguments and its help.

``build_parser()`` builds it afresh on each call, so the ``--kinds`` choices are the rows of
``hookscope.core.kinds`` at that moment (a row added at run time is among them). Each subcommand
sets ``run`` to its body in ``hookscope.cli.commands`` (``list``'s lives in ``hookscope.cli.listing``,
``demo``'s in ``hookscope.cli.demo``); ``hookscope.cli.main`` parses and calls it. A subcommand gets its
arguments when it is chosen (``COMMANDS`` names the function that adds them), so ``hookscope --help``
and ``--version`` import no torch; ``command_parser(name)`` is one subcommand's parser, filled.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

from .._version import __version__
from ..core import kinds

Group = Literal["model", "select", "preprocess"]  # the argument groups _shared adds

EXAMPLES = """examples:
  hookscope demo                                        EfficientNet-Lite0 on a bundled photo -> hookscope-demo/
  hookscope demo --model lenet                          LeNet on handwritten digits
  hookscope demo --model minilm                         a text model's attention and tokens (all-MiniLM-L6-v2)
  hookscope list torchvision:resnet18                   every layer: name, type, params, output shape
  hookscope report efficientnet-lite0 cat.jpg --grads --out report/
  hookscope report my_model.py:build batch.pt --select 'encoder.*' --out report/
  hookscope report minilm "The cat sat on the mat." --out report/
  hookscope cam efficientnet-lite0 photo.jpg --method gradcam++ --target 285 --out cam.png
  hookscope capture lenet random:8x1x32x32 --select 'conv*' --kinds output grad_output --out run.hookscope
  hookscope extract efficientnet-lite0 photos/ --select :blocks --batch-size 32 --out acts.hookscope
  torchrun --nproc-per-node 2 -m hookscope extract lenet random:512x1x32x32 --out acts.hookscope
  hookscope info acts.hookscope                         layers, kinds, shapes, sizes, batches, provenance
  hookscope explain lenet digit.png --expected 9 --out why-not-9/   the evidence of one wrong prediction
  hookscope report --from acts.hookscope --out report/  the report of a store, without the model
  hookscope tool explain path=acts.hookscope            a store read for an assistant, within a token budget
"""
INPUT_HELP = (
    "image(s), a folder, a .pt/.npy/.safetensors file, random:1x3x224x224; "
    "for a text model (minilm, hf:PATH): sentences in quotes or .txt files"
)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the options every command takes, then one subparser per command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    common.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda, cuda:1, mps (default: cpu)")
    top = argparse.ArgumentParser(
        prog="hookscope", description="See inside PyTorch networks.", epilog=EXAMPLES, parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    top.add_argument("--version", action="version", version=f"hookscope {__version__}")
    sub = cast(_Commands, top.add_subparsers(title="commands", required=True, metavar="COMMAND", action=_Commands))
    for name, (help_, example, fill) in COMMANDS.items():
        sub.add_parser(
            name, help=help_, description=help_, parents=[common], epilog=f"example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )  # fmt: skip
        sub.fillers[name] = fill
    return top


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of the subcommand ``name``, with all its arguments (as ``hookscope NAME --help`` shows it)."""
    help_, _, fill = COMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"hookscope {name}", description=help_)
    fill(parser)
    return parser


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """The subcommands, each given its arguments when it is chosen: ``hookscope --help`` and ``--version``
    import no torch (the arguments' choices and the commands' bodies do)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fillers: dict[str, Callable[[argparse.ArgumentParser], None]] = {}

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:  # fmt: skip
        if values:
            fill = self.fillers.pop(values[0], None)
            if fill is not None:
                fill(self.choices[values[0]])
        super().__call__(parser, namespace, values, option_string)


def _shared(p: argparse.ArgumentParser, group: Group, *, optional: bool = False) -> None:
    """Add one group of the arguments several commands share: ``model`` (MODEL and its weights;
    ``optional`` for ``report``, which can read a store instead), ``select`` (--select), or
    ``preprocess`` (--size, --mean, --std)."""
    from ..core.select import BLOCKS
    from .models import BUILTINS

    if group == "model":
        model_help = f"{', '.join(BUILTINS)}, torchvision:NAME, timm:NAME, hf:PATH, file.py:fn, pkg.mod:fn"
        p.add_argument("model", nargs="?" if optional else None, metavar="MODEL", help=model_help)
        p.add_argument("--weights", metavar="FILE",
                       help="a state dict: torch.save's (read with weights_only=True) or .safetensors")  # fmt: skip
        p.add_argument(
            "--trust-weights", action="store_true", help="unpickle a checkpoint that holds objects (runs code)"
        )
    elif group == "select":
        p.add_argument(
            "--select", nargs="+", metavar="SELECTOR", default=[BLOCKS],
            help=f"names, globs ('layer*': * crosses dots), re:REGEX, or {BLOCKS} (default: {BLOCKS}, the model's "
            "repeated blocks, or every leaf when it has none; Identity and padding left out of patterns)",
        )  # fmt: skip
    else:
        p.add_argument("--size", type=int, help="the side of the square the model sees (default: the model's)")
        p.add_argument("--mean", type=float, nargs="+", help="normalisation mean per channel, in [0, 1] units")
        p.add_argument("--std", type=float, nargs="+", help="normalisation std per channel, in [0, 1] units")


def _target(p: argparse.ArgumentParser, what: str) -> None:
    """``--target``, parsed by ``hookscope.cli.target_flag.parse_target``."""
    from .target_flag import parse_target

    p.add_argument("--target", type=parse_target, metavar="TARGET",
                   help=f"{what}: a class N, sum, mean, norm, an index into each row (0,5,2; --target=-1,3 when it "
                        "starts with a minus) or into the output ('[:, -1, 3]'), or file.py:function "
                        "(of the output)")  # fmt: skip


def _add_list(p: argparse.ArgumentParser) -> None:
    from .listing import run_list

    _shared(p, "model")
    p.add_argument("--input", metavar="SPEC", help="the input whose output shapes are shown (default: random)")
    p.set_defaults(run=run_list)


def _add_report(p: argparse.ArgumentParser) -> None:
    from ..explain.cam import CAM_METHODS
    from .ablate import HELP as ABLATE_HELP
    from .ablate import ablation_spec
    from .commands import run_report

    _shared(p, "model", optional=True)
    p.add_argument("inputs", nargs="*", metavar="INPUT", help=INPUT_HELP)
    p.add_argument("--from", dest="store", metavar="STORE", help="report a store (hookscope capture/extract) instead")
    p.add_argument("--batch", type=int, help="with --from: the batch whose tensors are shown (default: the first)")
    p.add_argument("--against", metavar="STORE", help="with --from a top_examples store: also the inputs whose "
                   "peak moved most from this store's run (checkpoint A) to --from's (B)")  # fmt: skip
    _shared(p, "select")
    p.add_argument("--grads", action="store_true", help="also capture gradients (of the target score)")
    drawable = [k for k in kinds.names() if kinds.per_call(k)]
    p.add_argument("--kinds", nargs="+", choices=drawable, metavar="KIND",
                   help=f"drawn on each layer's card: {', '.join(drawable)} (default: output, and grad_output "
                        "with --grads; a gradient kind implies --grads)")  # fmt: skip
    p.add_argument("--cam", nargs="+", choices=CAM_METHODS, metavar="METHOD", help="CAM methods (default: gradcam)")
    p.add_argument("--faithfulness", action="store_true",
                   help="each CAM's deletion and insertion beside a random map: AUC badges, curves")  # fmt: skip
    _target(p, "what gradients and CAMs explain (default: each image's top-1 class)")
    p.add_argument("--output", metavar="KEY",
                   help="of a model returning a tuple or dict: the tensor explained (default: the first)")  # fmt: skip
    p.add_argument("--top-k", type=int, help="predictions shown (default: 5)")
    p.add_argument("--max-layers", type=int, default=64, metavar="N",
                   help="layer cards drawn, in model order; a remark counts the rest (default: 64)")  # fmt: skip
    p.add_argument("--ablate", action="append", type=ablation_spec, metavar="SITE:EDIT", help=ABLATE_HELP)
    p.add_argument("--out", default="hookscope-report", help="output folder (default: hookscope-report)")
    p.add_argument("--force", action="store_true", help="replace the output folder if hookscope wrote it")
    _shared(p, "preprocess")
    p.set_defaults(run=run_report, parser=p)


def _add_cam(p: argparse.ArgumentParser) -> None:
    from ..explain.cam import CAM_METHODS
    from .commands import run_cam

    _shared(p, "model")
    p.add_argument("image", metavar="IMAGE", help="an image file")
    p.add_argument("--method", default="gradcam", choices=CAM_METHODS, help="CAM method (default: gradcam)")
    _target(p, "what to explain (default: the top-1 class)")
    p.add_argument("--output", metavar="KEY",
                   help="of a model returning a tuple or dict: the tensor explained (default: the first)")  # fmt: skip
    p.add_argument("--layer", help="module name (default: the last spatial map; on a ViT, the tokens its last "
                                   "attention reads)")  # fmt: skip
    p.add_argument("--panel", action="store_true", help="image | heatmap | overlay side by side")
    p.add_argument("--alpha", type=float, default=0.5, help="heatmap opacity (default: 0.5)")
    p.add_argument("--cmap", default="jet", help="matplotlib colormap (default: jet)")
    p.add_argument("--batch-size", type=int, default=32,
                   help="scorecam: masked copies of the image run at once (default: 32)")  # fmt: skip
    p.add_argument("--out", default="cam.png", help="output image (default: cam.png)")
    p.add_argument("--force", action="store_true", help="replace the output file if it exists")
    _shared(p, "preprocess")
    p.set_defaults(run=run_cam)


def _add_explain(p: argparse.ArgumentParser) -> None:
    from ..explain.cam import GRAD_METHODS
    from .bundles import run_explain

    _shared(p, "model")
    p.add_argument("image", metavar="IMAGE", help="one image file (or a .pt/.npy of one)")
    p.add_argument("--expected", type=int, required=True, help="the class the image should have been given")
    p.add_argument("--layer", help="module name (default: the layer cam picks, the last spatial map)")
    p.add_argument("--method", default="gradcam", choices=list(GRAD_METHODS), help="CAM method (default: gradcam)")
    p.add_argument("--top-k", type=int, default=5, help="top classes listed (default: 5)")
    p.add_argument("--seed", type=int, default=0, help="seeds the faithfulness controls (default: 0)")
    p.add_argument("--out", required=True, help="the bundle's folder (manifest.json, arrays, a store)")
    p.add_argument("--force", action="store_true", help="replace the bundle there if hookscope wrote it")
    _shared(p, "preprocess")
    p.set_defaults(run=run_explain)


def _add_demo(p: argparse.ArgumentParser) -> None:
    from .demo import DEMO_MODELS, run_demo

    p.add_argument("--model", default="efficientnet-lite0", choices=list(DEMO_MODELS))
    p.add_argument("--out", default="hookscope-demo", help="output folder (default: hookscope-demo)")
    p.add_argument("--force", action="store_true", help="replace the output folder if hookscope wrote it")
    p.set_defaults(run=run_demo)


def _add_capture(p: argparse.ArgumentParser) -> None:
    from .commands import run_capture

    _shared(p, "model")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=INPUT_HELP)
    _shared(p, "select")
    p.add_argument("--kinds", nargs="+", default=["output"], choices=kinds.names(), metavar="KIND",
                   help=f"what to capture: {', '.join(kinds.names())} (default: output)")  # fmt: skip
    _target(p, "with gradient kinds: what is differentiated (default: each input's top-1 class)")
    p.add_argument("--output", metavar="KEY",
                   help="of a model returning a tuple or dict: the tensor explained (default: the first)")  # fmt: skip
    p.add_argument("--out", required=True, help="the store to write (a folder)")
    p.add_argument("--force", action="store_true", help="replace the output folder if hookscope wrote it")
    _shared(p, "preprocess")
    p.set_defaults(run=run_capture)


def _add_extract(p: argparse.ArgumentParser) -> None:
    from ..store.format import FLUSH_EVERY, MAX_MEMORY, SHARD_SIZE
    from .commands import run_extract

    _shared(p, "model")
    p.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="images, folders, a tensor file (its rows), random:NxCxHxW"
    )
    _shared(p, "select")
    p.add_argument("--kinds", nargs="+", default=["output"], choices=kinds.forward_kinds(), metavar="KIND",
                   help=f"{', '.join(kinds.forward_kinds())} (default: output)")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=32, help="images per batch (default: 32)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (default: 0)")
    p.add_argument("--out", required=True, help="the store to write (a folder)")
    p.add_argument(
        "--max-memory", default=MAX_MEMORY, help=f"tensors held before the writer catches up (default: {MAX_MEMORY})"
    )
    p.add_argument("--shard-size", default=SHARD_SIZE, help=f"bytes per shard file (default: {SHARD_SIZE})")
    p.add_argument("--flush-every", type=float, default=FLUSH_EVERY, metavar="SECONDS",
                   help=f"a finished batch is on disk within this many seconds (default: {FLUSH_EVERY:g})")  # fmt: skip
    p.add_argument("--reduce", nargs="+", default=[], metavar="REDUCTION",
                   help="spatial_mean, first_rows:N, top_channels:K, applied in order")  # fmt: skip
    p.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], help="cast what is written")
    p.add_argument("--stats-only", action="store_true", help="write running statistics only, not tensors")
    p.add_argument("--per-channel", action="store_true", help="with --stats-only: also per channel (dim 1)")
    p.add_argument("--resume", action="store_true", help="continue a store an interrupted run left")
    p.add_argument("--force", action="store_true", help="replace the output folder if hookscope wrote it")
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    _shared(p, "preprocess")
    p.set_defaults(run=run_extract)


def _add_info(p: argparse.ArgumentParser) -> None:
    from .commands import run_info

    p.add_argument("store", metavar="STORE", help="a folder written by hookscope capture or extract, or an "
                   "evidence bundle (hookscope explain, watch(evidence=), nan_guard(evidence=))")  # fmt: skip
    p.add_argument("--verify", action="store_true", help="read every tensor's bytes through its CRC-32 "
                   "(default: the manifest and the shards' headers only, fast)")  # fmt: skip
    p.set_defaults(run=run_info)


def _add_tool(p: argparse.ArgumentParser) -> None:
    from .assistant import add_tool

    add_tool(p)


def _add_mcp(p: argparse.ArgumentParser) -> None:
    from .assistant import add_mcp

    add_mcp(p)


COMMANDS: dict[str, tuple[str, str, Callable[[argparse.ArgumentParser], None]]] = {
    "list": ("list every module: name, type, parameters, output shape",
             "hookscope list torchvision:resnet18 --input random:1x3x64x64", _add_list),
    "report": ("write a self-contained HTML report of what the layers saw",
               "hookscope report efficientnet-lite0 cat.jpg --grads --out report/\n"
               "  hookscope report --from acts.hookscope --out report/", _add_report),
    "cam": ("draw a CAM heatmap over an image",
            "hookscope cam efficientnet-lite0 photo.jpg --method gradcam++ --target 285 --out cam.png", _add_cam),
    "explain": ("write the evidence bundle of one (wrong) prediction: maps, faithfulness, a verified ablation",
                "hookscope explain lenet digit.png --expected 9 --out why-not-9/", _add_explain),
    "demo": ("the full report of a pretrained network on a bundled photo",
             "hookscope demo --model lenet --out lenet-demo/", _add_demo),
    "capture": ("capture the layers of one run of a model and save them as a store",
                "hookscope capture efficientnet-lite0 photos/ --select _blocks.15 _conv_head --out run.hookscope",
                _add_capture),
    "extract": ("stream what the layers produce over a whole data set to a store",
                "hookscope extract efficientnet-lite0 photos/ --select :blocks --batch-size 32 --out acts.hookscope",
                _add_extract),
    "info": ("what a store holds: layers, kinds, shapes, sizes, batches, provenance",
             "hookscope info acts.hookscope", _add_info),
    "tool": ("run an assistant's read-only tool (info, explain, compare, ...) within a token budget",
             "hookscope tool explain path=acts.hookscope --max-tokens 500", _add_tool),
    "mcp": ("serve the assistant's tools over MCP on stdio (needs hookscope[mcp])", "hookscope mcp", _add_mcp),
}  # fmt: skip
