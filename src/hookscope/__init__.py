"""hookscope: see what every layer of a PyTorch network saw, produced, and got back.

::

    with hookscope.capture(model, ["conv1", "layer*.conv2"], kinds=("output", "grad_output")) as cap:
        model(x).logsumexp(1).sum().backward()
    cap["conv1"].output, cap["conv1"].grad_output
    hookscope.feature_grid(cap["conv1"].output[0]).save("conv1.png")
    heat = hookscope.cam(model, x, method="gradcam", target=285)

Importing hookscope imports only the standard library and torch; pictures import Pillow and
matplotlib when they are drawn.
"""

from __future__ import annotations

from . import compare, edits, zoo
from ._version import __version__
from .base.deprecation import forward_moved_modules
from .core.capture import Capture, capture
from .core.channels import spatial_maps, tokens_to_grid
from .core.hooks import HookInfo, find_hooks
from .core.kinds import KINDS, Kind
from .core.policy import Policy
from .core.records import Call, Record
from .core.select import ModuleInfo, Selector, list_modules, select_modules
from .edits.edit import Edit, edit
from .edits.effects import PatchSweep
from .edits.patching import patch_sweep
from .errors import (
    AmbiguousCallError,
    BlockError,
    CaptureError,
    CaptureWarning,
    DamagedShardError,
    EditError,
    EditWarning,
    ForwardError,
    HookscopeError,
    HookscopeWarning,
    InputError,
    MissingDependencyError,
    ModelError,
    NonFiniteError,
    NonFiniteWarning,
    NotCapturedError,
    OptionError,
    OutputExistsError,
    SelectionError,
    ShapeError,
    StoreError,
    StoreWarning,
    TargetError,
)
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
from .stats.streaming import RunningStats
from .stats.summary import GradientFlow, Summary, gradient_flow, summarize
from .store.dataset import StoreDataset, StoreStream
from .store.extract import extract
from .store.reader import Run, load
from .store.save import save
from .store.series import Alert, History
from .train.alerts import Thresholds
from .train.guard import nan_guard
from .train.page import build_training_report
from .train.watch import Watch, watch
from .transformer.attention import Attention, attention
from .transformer.attribution import TokenAttribution, token_attribution
from .transformer.grid import attention_grid
from .transformer.lens import LogitLens, logit_lens
from .transformer.page import build_text_report
from .transformer.rollout import Rollout, attention_rollout
from .viz.charts import gradient_flow_plot, histogram_plot
from .viz.images import feature_grid, overlay, panel

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
    "DamagedShardError",
    "Edit",
    "EditError",
    "EditWarning",
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
    "LogitLens",
    "MapScores",
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
    "Rollout",
    "Run",
    "RunningStats",
    "SelectionError",
    "Selector",
    "ShapeError",
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
    "compare",
    "edit",
    "edits",
    "export",
    "extract",
    "faithfulness",
    "feature_grid",
    "find_hooks",
    "gradient_flow",
    "gradient_flow_plot",
    "histogram_plot",
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
    "save",
    "select_modules",
    "show",
    "spatial_maps",
    "summarize",
    "token_attribution",
    "tokens_to_grid",
    "watch",
    "write_report",
    "zoo",
]

forward_moved_modules()  # hookscope.cams, hookscope.report.top, ...: the paths of earlier versions, for one release
del forward_moved_modules
