"""``hookscope tool`` and ``hookscope mcp``: the assistant's tools on the command line, and their MCP server.

``hookscope tool`` lists the tools; ``hookscope tool NAME key=value ...`` runs one from the same
registry the MCP server serves (``hookscope.mcp.catalog``), each value read as its param's JSON
type, and prints the answer's Markdown (``--json``: its data). ``hookscope mcp`` serves the tools
over stdio, as ``python -m hookscope.mcp`` does.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from ..errors import OptionError


def add_tool(p: argparse.ArgumentParser) -> None:
    """The arguments of ``hookscope tool``.

    Args:
        p: the subcommand's parser.
    """
    p.add_argument("name", metavar="TOOL", nargs="?", help="the tool to run; leave out to list them")
    p.add_argument("arguments", metavar="KEY=VALUE", nargs="*", help="the tool's arguments, e.g. path=run.hookscope")
    p.add_argument("--max-tokens", type=int, default=None, help="the answer's budget in estimated tokens")
    p.add_argument("--json", action="store_true", help="print the answer's data as JSON instead of its text")
    p.set_defaults(run=run_tool)


def add_mcp(p: argparse.ArgumentParser) -> None:
    """The arguments of ``hookscope mcp`` (none: it serves on stdio).

    Args:
        p: the subcommand's parser.
    """
    p.set_defaults(run=run_mcp)


def run_tool(args: argparse.Namespace) -> int:
    """List the tools, or run one and print its answer.

    Args:
        args: the parsed command line.

    Returns:
        The exit status (0).

    Raises:
        OptionError: an argument is not ``key=value``, or its value is not of its param's type.
    """
    from ..mcp.catalog import TOOLS, answer

    if args.name is None:
        width = max(len(name) for name in TOOLS)
        for tool in TOOLS.values():
            params = " ".join(p.name + ("" if p.required else "?") for p in tool.params)
            print(f"{tool.name.ljust(width)}  {params}\n{' ' * width}  {tool.description}")
        return 0
    chosen = TOOLS.get(args.name)
    given = parsed(args.arguments, {p.name: p.type for p in chosen.params} if chosen else {})
    if args.max_tokens is not None:
        given["max_tokens"] = args.max_tokens
    found = answer(args.name, given)
    if args.json:
        print(json.dumps(found.data(), indent=2, default=str))
    else:
        print(found.text(), end="")
    return 0


def run_mcp(args: argparse.Namespace) -> int:
    """Serve the tools over MCP on stdio until the client closes.

    Args:
        args: the parsed command line.

    Returns:
        The exit status (0).
    """
    from ..mcp.server import serve

    serve()
    return 0


def parsed(pairs: list[str], types: dict[str, str]) -> dict[str, Any]:
    """``["path=run", "similarity=false"]`` as ``{"path": "run", "similarity": False}``, by each param's type.

    Args:
        pairs: ``key=value`` strings.
        types: param name -> JSON type (``string``, ``integer``, ``number``, ``boolean``).

    Returns:
        Keyword -> value.

    Raises:
        OptionError: a pair without ``=``, or a value its type cannot read.
    """
    found: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise OptionError(f"{pair!r} is not KEY=VALUE; write e.g. path=run.hookscope")
        kind = types.get(key, "string")
        read: dict[str, Callable[[str], Any]] = {"integer": int, "number": float, "boolean": _boolean, "string": str}
        try:
            found[key] = read[kind](value)
        except ValueError:
            raise OptionError(f"{key}={value!r} is not a {kind}") from None
    return found


def _boolean(value: str) -> bool:
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ValueError(value)
