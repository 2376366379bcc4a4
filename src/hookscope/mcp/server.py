"""The MCP server: the registry's tools over the Model Context Protocol, on stdio.

``serve()`` answers ``tools/list`` with each tool's name, description and JSON Schema (from
``catalog.TOOLS``, read-only and idempotent hints set) and ``tools/call`` with the fitted answer:
its Markdown as text content and its data as structured content. A tool's error (a store that is
not there, an argument it refuses) is an error result with hookscope's one-line message; the
server keeps serving. Needs the ``mcp`` package (``pip install 'hookscope[mcp]'``).
"""

from __future__ import annotations

from typing import Any

from ..base.optional import require_all
from ..errors import HookscopeError
from .catalog import TOOLS, answer

NAME = "hookscope"


def build() -> Any:
    """The ``mcp`` low-level ``Server`` with hookscope's tools registered.

    Returns:
        An ``mcp.server.lowlevel.Server``.

    Raises:
        MissingDependencyError: ``mcp`` is not installed.
    """
    require_all(["mcp"], needed_by="the MCP server")
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from .._version import __version__

    listed = [
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=tool.schema(),
            annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
        )
        for tool in TOOLS.values()
    ]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: Any) -> Any:
        try:
            found = answer(params.name, params.arguments or {})
        except HookscopeError as err:
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(err))], is_error=True)
        text = types.TextContent(type="text", text=found.text())
        return types.CallToolResult(content=[text], structured_content=found.data())

    return Server(NAME, version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


def serve() -> None:
    """Serve the tools over stdio until the client closes the connection.

    Raises:
        MissingDependencyError: ``mcp`` is not installed.
    """
    server = build()
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
