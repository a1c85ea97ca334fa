#!/usr/bin/env python3
"""A test upstream for switchboard, written with the official Python MCP SDK (mcp 2.3.0).

switchboard runs it as a stdio child (`upstreams` in switchboard.json) in
tests/integration/upstream.rs. Its tools push notifications the way a Teams/Entra bridge or
a CI server would, so the tests can check what switchboard stores:

- `burst(n)`: n notifications as fast as the SDK sends them, cycling
  `notifications/claude/channel` (content + meta), `notifications/message` (a log entry) and
  a custom `notifications/x`; each carries its index `i`, so wire order can be checked.
- `flood(n)`: n custom notifications, for backpressure; returns when all are written.
- `timed(n, gap_ms)`: n notifications on `lat`, spaced, each with its send time (latency).
- `echo(text)`: returns `echo: TEXT` (a re-exported tool called end to end).
- `fail(reason)`: a tool error (`isError: true`) with the reason.
- `add_tool()`: registers `extra` and sends `notifications/tools/list_changed`.
- `hang(seconds)`: answers only after `seconds`, as a stuck upstream does; says `hang
  cancelled` on stderr when the client cancels the call.
"""

from __future__ import annotations

import os
import sys
import time

import anyio

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("switchboard-test-upstream", version="1.0.0")


def connection(ctx: Context):
    # The session's standalone stream: for stdio, the pipe itself.
    return ctx.session._connection


@server.tool()
async def burst(n: int, ctx: Context) -> str:
    """Push n notifications cycling claude/channel, message and notifications/x."""
    conn = connection(ctx)
    for i in range(n):
        kind = i % 3
        if kind == 0:
            await conn.notify(
                "notifications/claude/channel",
                {"content": f"dm {i}", "meta": {"i": str(i), "chat_id": f"chat{i % 4}", "sender": "Ada"}},
            )
        elif kind == 1:
            await conn.notify("notifications/message", {"level": "info", "logger": "bridge", "data": f"log {i}"})
        else:
            await conn.notify("notifications/x", {"i": i, "meta": {"i": str(i)}})
    return f"sent {n}"


@server.tool()
async def flood(n: int, ctx: Context) -> str:
    """Push n custom notifications as fast as possible."""
    conn = connection(ctx)
    for i in range(n):
        await conn.notify("notifications/flood", {"i": i})
    return f"flooded {n}"


@server.tool()
async def timed(n: int, gap_ms: int, ctx: Context) -> str:
    """Push n notifications on channel `lat`, gap_ms apart, each stamped with its send time."""
    conn = connection(ctx)
    for i in range(n):
        await conn.notify("notifications/lat", {"i": i, "meta": {"sent_ns": str(time.time_ns())}})
        await anyio.sleep(gap_ms / 1000)
    return f"timed {n}"


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return f"echo: {text}"


@server.tool()
def fail(reason: str) -> str:
    """Fail with a tool error."""
    raise ToolError(reason)


@server.tool()
async def hang(seconds: float) -> str:
    """Answer only after the given number of seconds."""
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        print("hang cancelled", file=sys.stderr, flush=True)
        raise
    return "woke"


def extra() -> str:
    """A tool added at run time."""
    return "extra"


@server.tool()
async def add_tool(ctx: Context) -> str:
    """Register `extra` and announce the new tool list."""
    server.add_tool(extra)
    await connection(ctx).send_tool_list_changed()
    return "added"


if __name__ == "__main__":
    print(f"test upstream pid {os.getpid()} starting", file=sys.stderr, flush=True)
    server.run("stdio")
