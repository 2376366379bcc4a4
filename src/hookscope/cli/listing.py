"""``hookscope list``: a row per module, its type, its parameters and the output shapes of one forward
pass (on ``--input``, else a random image of the model's size, or a sentence for a text model).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import torch

from ..base.words import columns
from ..core.capture import Capture, shapes_of
from ..core.compiled import named_modules
from ..core.select import list_modules
from .forward_guard import ForwardGuard
from .inputs import load_input
from .loading import model_from
from .models import LoadedModel
from .text_inputs import probe_text

NOT_RUN = "(did not run)"  # a module the probe's forward never called


def run_list(args: argparse.Namespace) -> int:
    loaded = model_from(args)
    shapes = _output_shapes(loaded, args.input, args.device)
    rows = [(i.name or "(model)", i.type, f"{i.params:,}", shapes.get(i.name, "-")) for i in list_modules(loaded.model)]
    for line in columns([("name", "type", "params", "output"), *rows], right={2}):
        print(line)
    idle = [name for name, shape in shapes.items() if shape == NOT_RUN]
    if idle:
        print(f"hookscope: {len(idle)} of the modules did not run on this input (first: {idle[0]!r}), so they "
              "have no output shape: the forward skips them or reads their weights directly (as "
              "nn.MultiheadAttention does with out_proj)", file=sys.stderr)  # fmt: skip
    return 0


def _output_shapes(loaded: LoadedModel, spec: str | None, device: str) -> dict[str, str]:
    # a text model reads a sentence, or --input's text (cli/text_inputs)
    cap = probe_text(loaded, spec, device) if loaded.tokenizer is not None else _probe_image(loaded, spec, device)
    modules = dict(named_modules(loaded.model, remove_duplicate=False))  # a compiled model: its eager names
    return {name: _shape_cell(record.calls, modules[name]) for name, record in cap.items()}


def _probe_image(loaded: LoadedModel, spec: str | None, device: str) -> Capture:
    size = loaded.preprocess.size
    args: tuple[torch.Tensor, ...] = (torch.randn(1, loaded.preprocess.channels, size, size, device=device),)
    kwargs: dict[str, torch.Tensor] = {}
    if spec is not None:
        args, kwargs = load_input([spec], loaded.preprocess).feed(device)
    with ForwardGuard(loaded.model, args, kwargs):
        return shapes_of(loaded.model, *args, **kwargs)


def _shape_cell(calls: Sequence[Any], module: torch.nn.Module) -> str:
    """The output column of ``hookscope list``: the first call's output shapes, and how often the module ran."""
    if not calls:  # a container (ModuleList) is never called itself; any other module was bypassed
        return "(container)" if type(module).forward is torch.nn.Module.forward else NOT_RUN
    shapes = " ".join(str(tuple(t.shape)) for t in calls[0].tensors.get("output", {}).values()) or "-"
    return shapes + (f" ({len(calls)} calls)" if len(calls) > 1 else "")
