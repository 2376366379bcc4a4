"""An exception from the model's own forward, as one line that names the module it came from.

``ForwardGuard`` wraps a command's forward passes; when one raises (anything but a hookscope error or
an interrupt), the forward runs again with every module watched (on the meta device: no values are
kept) and the ``ForwardError`` names the module it failed inside and the last one to finish, with
the ``--size`` hint when the input's size is the likely cause.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch

from ..core.capture import capture
from ..errors import CaptureWarning, ForwardError, HookscopeError
from .inputs import LoadedInput, size_hint


class ForwardGuard(contextlib.AbstractContextManager[None]):
    """Turn an exception from the model's forward into one line naming the module it came from."""

    def __init__(self, model: torch.nn.Module, x: Any, kwargs: dict[str, Any] | None = None, *,
                 batch: LoadedInput | None = None) -> None:  # fmt: skip
        self.model, self.args, self.kwargs = model, x if isinstance(x, tuple) else (x,), kwargs or {}
        self.batch = batch  # the inputs as the command read them: a wrong size gets the --size hint

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, (HookscopeError, KeyboardInterrupt)):
            return
        where = where_forward_fails(self.model, self.args, self.kwargs)
        if where is not None:
            message = " ".join(str(exc).split())  # one line, whatever the model raised
            hint = size_hint(self.batch, message) if self.batch is not None else ""
            raise ForwardError(f"the model's forward raised {type(exc).__name__}: {message} {where}{hint}; "
                               "rerun with --debug for the traceback") from exc  # fmt: skip


def where_forward_fails(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Run the forward again with every module watched; None when it does not fail."""
    cap = capture(model, lambda name, _: True, device="meta")
    try:
        with warnings.catch_warnings(), cap, torch.no_grad():
            warnings.simplefilter("ignore", CaptureWarning)
            model(*args, **kwargs)
    except Exception:
        calls = [c for r in cap.values() for c in r.calls if c.order >= 0]
        failed = [c for c in calls if c.error is not None and c.site]
        finished = [c for c in calls if c.error is None]
        inside = f"inside module {min(failed, key=lambda c: c.order).site!r}" if failed else "outside any submodule"
        last = f"; the last module to finish was {max(finished, key=lambda c: c.order).site!r}" if finished else ""
        return f"({inside}{last})"
    return None
