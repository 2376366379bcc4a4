"""The MCP server, started as ``python -m hookscope.mcp`` and driven by the ``mcp`` package's own client.

The oracle is the registry: the tools the server lists, with their schemas, are ``catalog.TOOLS``'s;
a budgeted answer fits its budget and lists what it left out; an error is an error result and the
server keeps serving. The command line's ``hookscope tool`` gives the same answer as the registry.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.cli import main
from hookscope.mcp.budget import tokens
from hookscope.mcp.catalog import TOOLS, answer

pytest.importorskip("mcp", reason="the MCP server needs the mcp package (hookscope[mcp])")
SRC = Path(hookscope.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    net = nn.Sequential(*(nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(12)))
    out = tmp_path_factory.mktemp("server") / "a.hookscope"
    hookscope.extract(net, [torch.randn(4, 8) for _ in range(2)], out=out, progress=False)
    return out


async def session_calls(store: Path) -> dict[str, Any]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    params = StdioServerParameters(command=sys.executable, args=["-m", "hookscope.mcp"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        small = await session.call_tool("explain", {"path": str(store), "max_tokens": 120})
        missing = await session.call_tool("info", {"path": str(store.parent / "nothing")})
        after = await session.call_tool("sites", {"path": str(store)})
    return {"listed": listed, "small": small, "missing": missing, "after": after}


@pytest.fixture(scope="module")
def served(store: Path) -> dict[str, Any]:
    import anyio

    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(120):  # a server that hangs fails the test instead of stalling CI
            return await session_calls(store)

    with ThreadPoolExecutor(1) as pool:  # a loop of its own: an earlier test's kernel may run one in this thread
        return pool.submit(anyio.run, bounded).result(timeout=180)


def test_the_served_tools_are_the_registry(served: dict[str, Any]) -> None:
    listed = {t.name: t for t in served["listed"].tools}
    assert list(listed) == list(TOOLS)
    for name, tool in TOOLS.items():
        assert listed[name].input_schema == tool.schema()
        assert listed[name].description == tool.description
        assert listed[name].annotations.read_only_hint is True


def test_a_budgeted_answer_fits_and_lists_what_it_left_out(served: dict[str, Any], store: Path) -> None:
    small = served["small"]
    assert not small.is_error
    text = small.content[0].text
    assert tokens(text) <= 120
    dropped = [d["title"] for d in small.structured_content["dropped"]]
    assert dropped and all(f"{title} (~" in text for title in dropped)
    assert small.structured_content == answer("explain", {"path": str(store), "max_tokens": 120}).data()


def test_an_error_is_an_error_result_and_the_server_keeps_serving(served: dict[str, Any]) -> None:
    missing = served["missing"]
    assert missing.is_error and "does not exist" in missing.content[0].text
    assert not served["after"].is_error and "Sites (24)" in served["after"].content[0].text


def test_the_command_line_runs_the_same_registry(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tool", "statistics", f"path={store}", "site=0.*", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(answer("statistics", {"path": str(store), "site": "0.*"}).data()))
    assert main(["tool"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in TOOLS)
    assert main(["tool", "compare", f"path_a={store}", f"path_b={store}", "similarity=false"]) == 0
    assert "CKA" not in capsys.readouterr().out
