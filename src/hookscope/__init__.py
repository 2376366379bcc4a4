"""hookscope: see what every layer of a PyTorch network saw, produced, and got back.

::

    with hookscope.capture(model, ["conv1", "layer*.conv2"], kinds=("output", "grad_output")) as cap:
        model(x).logsumexp(1).sum().backward()
    cap["conv1"].output, cap["conv1"].grad_output

Importing hookscope imports only the standard library and torch.
"""

from __future__ import annotations

from .capture import Capture, capture
from .errors import (
    AmbiguousCallError,
    CaptureError,
    CaptureWarning,
    HookscopeError,
    NotCapturedError,
    SelectionError,
)
from .hooks import HookInfo, find_hooks
from .policy import Policy
from .records import KINDS, Call, Kind, Record
from .select import ModuleInfo, Selector, list_modules, select_modules

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "AmbiguousCallError",
    "Call",
    "Capture",
    "CaptureError",
    "CaptureWarning",
    "HookInfo",
    "HookscopeError",
    "Kind",
    "ModuleInfo",
    "NotCapturedError",
    "Policy",
    "Record",
    "SelectionError",
    "Selector",
    "__version__",
    "capture",
    "find_hooks",
    "list_modules",
    "select_modules",
]
