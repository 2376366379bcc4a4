"""The ``hookscope`` command: ``list``, ``report``, ``cam``, ``demo``, and for stores ``capture``, ``extract``,
``info``, ``report --from``.

``main(argv) -> int`` is the console script (``hookscope = "hookscope.cli:main"``) and
``python -m hookscope``: 0 on success, 1 for a hookscope error (one line on stderr), 2 for a
usage error; ``--debug`` shows the traceback instead. Beside it: ``parser`` (the argparse
definition), ``commands`` (the subcommands' bodies; ``listing``: ``list``; ``loading``: the model and inputs as
the flags say; ``forward_guard``: the module a forward failed in), ``demo``, the readers of specs, ``models`` (with
``timm_models``), ``inputs`` and ``datasets`` (``formats`` tells what a file is), ``outputs`` (outputs checked before
any work), ``one_pass`` (``capture``'s pass), ``target_flag`` (``--target``), ``captions`` (``cam --panel``)
and ``progress``.
Warnings print as one line, ``hookscope: warning: ...``, in the flags' words (``one_line``,
``outputs.cli_flags``). Nothing else in hookscope imports this package.
"""

from __future__ import annotations

import logging
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import HookscopeError, HookscopeWarning
from .outputs import cli_flags
from .parser import build_parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return its exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        with warnings.catch_warnings():  # restores showwarning after; formatwarning by hand
            warnings.showwarning = _in_cli_terms(warnings.showwarning)
            formatted, warnings.formatwarning = warnings.formatwarning, one_line
            try:
                result: int = args.run(args)
            finally:
                warnings.formatwarning = formatted
        return result
    except (HookscopeError, OSError) as err:
        if args.debug:
            traceback.print_exc()
        else:
            message = cli_flags(str(err)) if isinstance(err, HookscopeError) else str(err)
            print(f"hookscope: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hookscope: interrupted", file=sys.stderr)
        return 130


def _in_cli_terms(show: Callable[..., Any]) -> Callable[..., Any]:
    """``warnings.showwarning`` that writes a hookscope warning's keywords as the flags (``cli_flags``:
    ``resume=True`` as ``--resume``, ``output="out['logits']"`` as ``--output logits``)."""

    def shown(message: Warning | str, category: type[Warning], *where: Any, **more: Any) -> Any:
        if issubclass(category, HookscopeWarning):
            message = category.__new__(category, cli_flags(str(message)))  # its text only, whatever its __init__ takes
        return show(message, category, *where, **more)

    return shown


def one_line(message: Warning | str, category: type[Warning], *where: Any, **more: Any) -> str:
    """A warning as the command line prints it: ``hookscope: warning: ...`` on one line, without Python's
    file, line number and source line (they point into hookscope, not at anything the user wrote)."""
    text = " ".join(str(message).split())
    named = "" if issubclass(category, HookscopeWarning) else f"{category.__name__}: "
    return f"hookscope: warning: {named}{text}\n"
