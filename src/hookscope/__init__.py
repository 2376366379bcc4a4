"""hookscope: see what every layer of a PyTorch network saw, produced, and got back.

::

    with hookscope.capture(model, ["conv1", "layer*.conv2"], kinds=("output", "grad_output")) as cap:
        model(x).logsumexp(1).sum().backward()
    cap["conv1"].output, cap["conv1"].grad_output
    hookscope.feature_grid(cap["conv1"].output[0]).save("conv1.png")
    heat = hookscope.cam(model, x, method="gradcam", target=285)

Importing hookscope imports only the standard library; the first use of a public name imports
the API (torch with it); pictures import Pillow and matplotlib when they are drawn.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from ._version import __version__
from .base.deprecation import forward_moved_modules
from .errors import (
    AmbiguousCallError,
    BlockError,
    CaptureError,
    CaptureWarning,
    CompiledWarning,
    DamagedShardError,
    EditError,
    EditWarning,
    ForwardError,
    HookscopeError,
    HookscopeWarning,
    InputError,
    MismatchError,
    MissingDependencyError,
    ModelError,
    NonFiniteError,
    NonFiniteWarning,
    NotCapturedError,
    OptionError,
    OutputExistsError,
    SelectionError,
    ServingError,
    ServingWarning,
    ShapeError,
    StoreError,
    StoreWarning,
    TargetError,
)

if _typing.TYPE_CHECKING:  # at run time the first use of a public name imports them all (__getattr__)
    from . import compare, edits, zoo
    from .core.call import Call
    from .core.capture import Capture, capture
    from .core.channels import spatial_maps, tokens_to_grid
    from .core.hooks import HookInfo, find_hooks
    from .core.kinds import KINDS, Kind
    from .core.policy import Policy
    from .core.records import Record
    from .core.select import ModuleInfo, Selector, list_modules, select_modules
    from .edits.edit import Edit, edit
    from .edits.effects import PatchSweep
    from .edits.patching import patch_sweep
    from .evidence.prediction import explain_prediction
    from .evidence.result import Evidence
    from .explain.attribute import attribute
    from .explain.cam import cam
    from .explain.layers import pick_layer
    from .exports.dispatch import export
    from .faithful.measure import faithfulness
    from .faithful.result import Faithfulness, MapScores
    from .graph.nodes import Graph
    from .graph.trace import module_graph
    from .probes.probe import probe
    from .probes.result import Probes
    from .probes.top import TopExamples
    from .report.build import build_report
    from .report.content import Report
    from .report.html import render_html, write_report
    from .report.inline import show
    from .serving.engine import LLMCapture, capture_llm
    from .serving.intervene import LLMEdit, edit_llm
    from .serving.result import RequestEdits
    from .stats.gradient_flow import GradientFlow, gradient_flow
    from .stats.streaming import RunningStats
    from .stats.summary import Summary, summarize
    from .steer.direction import Direction, Directions
    from .steer.directions import directions
    from .steer.result import SteerSweep
    from .steer.sweep import steer_sweep
    from .store.dataset import StoreDataset, StoreStream
    from .store.extract import extract
    from .store.history import Alert, History
    from .store.reader import Run, load
    from .store.save import save
    from .train.alerts import Thresholds
    from .train.guard import nan_guard
    from .train.page import build_training_report
    from .train.watch import Watch, watch
    from .transformer.attention import Attention, attention
    from .transformer.attribution import token_attribution
    from .transformer.grid import attention_grid
    from .transformer.lens import LogitLens, logit_lens
    from .transformer.linear import LinearAttention
    from .transformer.page import build_text_report
    from .transformer.recurrent import linear_attention
    from .transformer.rollout import Rollout, attention_rollout
    from .transformer.routing import Routing, routing
    from .transformer.token_scores import TokenAttribution
    from .viz.charts import gradient_flow_plot, histogram_plot
    from .viz.images import feature_grid, overlay, panel

# Where each public name lives: the first use of one imports these modules, all of them (torch with
# them), so `import hookscope` and `hookscope --help` stay quick and every face is registered at once.
_ROOMS = ("compare", "edits", "zoo")
_HOMES = {
    ".core.capture": "Capture capture",
    ".core.channels": "spatial_maps tokens_to_grid",
    ".core.hooks": "HookInfo find_hooks",
    ".core.kinds": "KINDS Kind",
    ".core.policy": "Policy",
    ".core.call": "Call",
    ".core.records": "Record",
    ".core.select": "ModuleInfo Selector list_modules select_modules",
    ".edits.edit": "Edit edit",
    ".edits.effects": "PatchSweep",
    ".edits.patching": "patch_sweep",
    ".evidence.prediction": "explain_prediction",
    ".evidence.result": "Evidence",
    ".explain.attribute": "attribute",
    ".explain.cam": "cam",
    ".explain.layers": "pick_layer",
    ".exports.dispatch": "export",
    ".faithful.measure": "faithfulness",
    ".faithful.result": "Faithfulness MapScores",
    ".graph.nodes": "Graph",
    ".graph.trace": "module_graph",
    ".probes.probe": "probe",
    ".probes.result": "Probes",
    ".probes.top": "TopExamples",
    ".probes.views": "",  # no name: importing it registers TopExamples' notebook view and page section
    ".report.build": "build_report",
    ".report.content": "Report",
    ".report.html": "render_html write_report",
    ".report.inline": "show",
    ".serving.engine": "LLMCapture capture_llm",
    ".serving.intervene": "LLMEdit edit_llm",
    ".serving.result": "RequestEdits",
    ".stats.streaming": "RunningStats",
    ".steer.result": "SteerSweep",
    ".steer.sweep": "steer_sweep",
    ".steer.direction": "Direction Directions",
    ".steer.directions": "directions",
    ".stats.gradient_flow": "GradientFlow gradient_flow",
    ".stats.summary": "Summary summarize",
    ".store.dataset": "StoreDataset StoreStream",
    ".store.extract": "extract",
    ".store.history": "Alert History",
    ".store.reader": "Run load",
    ".store.save": "save",
    ".train.alerts": "Thresholds",
    ".train.guard": "nan_guard",
    ".train.page": "build_training_report",
    ".train.watch": "Watch watch",
    ".transformer.attention": "Attention attention",
    ".transformer.attribution": "token_attribution",
    ".transformer.grid": "attention_grid",
    ".transformer.lens": "LogitLens logit_lens",
    ".transformer.linear": "LinearAttention",
    ".transformer.page": "build_text_report",
    ".transformer.recurrent": "linear_attention",
    ".transformer.rollout": "Rollout attention_rollout",
    ".transformer.routing": "Routing routing",
    ".transformer.token_scores": "TokenAttribution",
    ".viz.charts": "gradient_flow_plot histogram_plot",
    ".viz.images": "feature_grid overlay panel",
}

__all__ = [
    "KINDS",
    "Alert",
    "AmbiguousCallError",
    "Attention",
    "BlockError",
    "Call",
    "Capture",
    "CaptureError",
    "CaptureWarning",
    "CompiledWarning",
    "DamagedShardError",
    "Direction",
    "Directions",
    "Edit",
    "EditError",
    "EditWarning",
    "Evidence",
    "Faithfulness",
    "ForwardError",
    "GradientFlow",
    "Graph",
    "History",
    "HookInfo",
    "HookscopeError",
    "HookscopeWarning",
    "InputError",
    "Kind",
    "LLMCapture",
    "LLMEdit",
    "LinearAttention",
    "LogitLens",
    "MapScores",
    "MismatchError",
    "MissingDependencyError",
    "ModelError",
    "ModuleInfo",
    "NonFiniteError",
    "NonFiniteWarning",
    "NotCapturedError",
    "OptionError",
    "OutputExistsError",
    "PatchSweep",
    "Policy",
    "Probes",
    "Record",
    "Report",
    "RequestEdits",
    "Rollout",
    "Routing",
    "Run",
    "RunningStats",
    "SelectionError",
    "Selector",
    "ServingError",
    "ServingWarning",
    "ShapeError",
    "SteerSweep",
    "StoreDataset",
    "StoreError",
    "StoreStream",
    "StoreWarning",
    "Summary",
    "TargetError",
    "Thresholds",
    "TokenAttribution",
    "TopExamples",
    "Watch",
    "__version__",
    "attention",
    "attention_grid",
    "attention_rollout",
    "attribute",
    "build_report",
    "build_text_report",
    "build_training_report",
    "cam",
    "capture",
    "capture_llm",
    "compare",
    "directions",
    "edit",
    "edit_llm",
    "edits",
    "explain_prediction",
    "export",
    "extract",
    "faithfulness",
    "feature_grid",
    "find_hooks",
    "gradient_flow",
    "gradient_flow_plot",
    "histogram_plot",
    "linear_attention",
    "list_modules",
    "load",
    "logit_lens",
    "module_graph",
    "nan_guard",
    "overlay",
    "panel",
    "patch_sweep",
    "pick_layer",
    "probe",
    "render_html",
    "routing",
    "save",
    "select_modules",
    "show",
    "spatial_maps",
    "steer_sweep",
    "summarize",
    "token_attribution",
    "tokens_to_grid",
    "watch",
    "write_report",
    "zoo",
]

forward_moved_modules()  # hookscope.cams, hookscope.report.top, ...: the paths of earlier versions, for one release
del forward_moved_modules
_loading = False


def __getattr__(name: str) -> _typing.Any:
    """A public name at its first use: the API's modules are imported then, all at once, as an eager
    ``import hookscope`` would have done. While they import, a name asked for again (``from .. import zoo``
    inside them) is left to the import system."""
    global _loading
    if name.startswith("__") or _loading:
        raise AttributeError(f"module 'hookscope' has no attribute {name!r}")
    _loading = True
    try:
        for room in _ROOMS:
            globals()[room] = _importlib.import_module(f".{room}", __name__)
        for home, names in _HOMES.items():
            module = _importlib.import_module(home, __name__)
            globals().update({n: getattr(module, n) for n in names.split()})
    finally:
        _loading = False
    if name not in globals():
        raise AttributeError(f"module 'hookscope' has no attribute {name!r}")
    return globals()[name]
