#!/usr/bin/env python3
"""switchboard's MCP server end to end, driven by the official Python MCP SDK (mcp 2.3.0).

Run by `cargo test` (tests/integration/python_sdk.rs) in a venv it builds, or by hand:

    python tests/python/mcp_sdk_e2e.py --bin target/debug/switchboard --transport stdio
    python tests/python/mcp_sdk_e2e.py --bin target/debug/switchboard --transport http

Each home is a fresh temporary directory without triggers.json, so the built-in catch-all
notify rule turns every message into a `nudge`. Checks, each reported on stderr:

- connect (the SDK probes `server/discover`, gets -32601 and falls back to `initialize`) as
  `claude-code`: serverInfo `switchboard`, protocol 2025-11-25, `claude/channel` capability;
- tools/list: the design's tools, each with an object input schema;
- long-poll: `wait_for_inbound_message` times out empty, then wakes on a message sent
  with `switchboard send` while it is pending;
- push: `notifications/claude/channel`, received through the SDK's client extension
  mechanism (a `ClientExtension` whose `NotificationBinding` observes that method);
- a session named `copilot-cli` gets `notifications/message` for a new message but no
  `notifications/claude/channel`, although it binds that method too;
- shutdown: a stdio server exits by itself on EOF (within the SDK's 2 s grace before SIGTERM),
  the HTTP server exits 0 on SIGTERM, both cleanly (endpoint.json removed).

Exit status 0 when every check passed, 1 (with the reason on stderr) otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client import ClientExtension, NotificationBinding
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Implementation, LoggingMessageNotificationParams
from pydantic import BaseModel, ConfigDict

SDK_VERSION = "2.3.0"
PROTOCOL = "2025-11-25"
CLAUDE_CHANNEL = "notifications/claude/channel"
TOOLS = [
    "wait_for_inbound_message",
    "inbox_pull",
    "channel_list",
    "channel_ack",
    "channel_confirm",
    "channel_run",
    "channel_reply",
    "channel_pause",
    "channel_resume",
    "rules_list",
    "rules_reload",
    "inbox_stats",
]
CHANNEL = "alerts/critical"
TEXT = "disk full on db-1"
SECOND_TEXT = "disk full on db-2"
# Every wait for something that should arrive is bounded by this; the whole run by TOTAL.
ARRIVAL_S = 10.0
TOTAL_S = 100.0
# How long the copilot-cli session must stay without a channel push after its log message.
QUIET_WINDOW_S = 1.0
# The SDK's grace between closing a stdio server's stdin and SIGTERM (PROCESS_TERMINATION_TIMEOUT).
STDIO_GRACE_S = 2.0
SERVER_ENV = {"RUST_LOG": "switchboard=debug,info"}

T = TypeVar("T")


class CheckFailed(Exception):
    """An assertion about the server's behaviour did not hold."""


def check(condition: Any, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


def passed(what: str) -> None:
    print(f"ok   {what}", file=sys.stderr, flush=True)


async def within(seconds: float, awaitable: Awaitable[T], what: str) -> T:
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        raise CheckFailed(f"timed out after {seconds:g} s: {what}") from None


# --- the client extension: Claude Code's channel notification ------------------------------


class ChannelParams(BaseModel):
    """`params` of `notifications/claude/channel`; the types are checked by the test itself,
    so that a wrong type is a clear failure rather than a notification the SDK drops."""

    model_config = ConfigDict(extra="allow")
    content: Any = None
    meta: Any = None


@dataclass
class Seen:
    """What one client session received outside its requests."""

    channel: list[ChannelParams] = field(default_factory=list)
    channel_event: asyncio.Event = field(default_factory=asyncio.Event)
    logs: list[LoggingMessageNotificationParams] = field(default_factory=list)
    log_event: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_channel(self, params: ChannelParams) -> None:
        self.channel.append(params)
        self.channel_event.set()

    async def on_log(self, params: LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self.log_event.set()

    async def channel_push(self, seq: int) -> ChannelParams:
        """The channel push for message `seq`, waiting for it with a deadline."""

        async def wait() -> ChannelParams:
            while True:
                for p in self.channel:
                    if isinstance(p.meta, dict) and p.meta.get("seq") == str(seq):
                        return p
                self.channel_event.clear()
                await self.channel_event.wait()

        return await within(ARRIVAL_S, wait(), f"{CLAUDE_CHANNEL} for seq {seq}")

    async def inbox_log(self, seq: int) -> LoggingMessageNotificationParams:
        """The `notifications/message` (logger switchboard.inbox) for message `seq`."""

        async def wait() -> LoggingMessageNotificationParams:
            while True:
                for p in self.logs:
                    if p.logger == "switchboard.inbox" and isinstance(p.data, dict) and p.data.get("seq") == seq:
                        return p
                self.log_event.clear()
                await self.log_event.wait()

        return await within(ARRIVAL_S, wait(), f"notifications/message for seq {seq}")


class ClaudeChannel(ClientExtension):
    """Observes `notifications/claude/channel` through the SDK's notification binding."""

    identifier = "dev.switchboard.test/claude-channel"

    def __init__(self, seen: Seen) -> None:
        self._seen = seen

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [NotificationBinding(method=CLAUDE_CHANNEL, params_type=ChannelParams, handler=self._seen.on_channel)]


# --- servers and sessions --------------------------------------------------------------------


@dataclass
class Home:
    """A switchboard home directory and the binary that serves it."""

    bin: Path
    dir: Path

    @property
    def log(self) -> Path:
        return self.dir / "server.log"

    async def send(self, channel: str, text: str) -> None:
        """`switchboard --home HOME send --channel CHANNEL TEXT`, output captured."""
        proc = await asyncio.create_subprocess_exec(
            str(self.bin),
            "--home",
            str(self.dir),
            "send",
            "--channel",
            channel,
            text,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await within(ARRIVAL_S, proc.communicate(), "switchboard send")
        check(
            proc.returncode == 0,
            f"switchboard send exited {proc.returncode}: stdout {out.decode()!r} stderr {err.decode()!r}",
        )


async def stop_process(proc: asyncio.subprocess.Process, deadline_s: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL when it has not exited by the deadline; whether SIGTERM sufficed."""
    if proc.returncode is not None:
        return True
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), deadline_s)
        return True
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return False


@contextlib.asynccontextmanager
async def http_server(home: Home) -> AsyncIterator[str]:
    """`serve --no-stdio --no-listen --http 127.0.0.1:0` on `home`; yields the MCP URL."""
    with open(home.log, "ab") as log:
        proc = await asyncio.create_subprocess_exec(
            str(home.bin),
            "--home",
            str(home.dir),
            "serve",
            "--no-stdio",
            "--no-listen",
            "--http",
            "127.0.0.1:0",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, **SERVER_ENV},
        )
    try:
        deadline = time.monotonic() + 30
        url = None
        while url is None:
            try:
                url = json.loads((home.dir / "endpoint.json").read_text()).get("mcp")
            except (OSError, ValueError):
                pass
            if url is None:
                check(proc.returncode is None, f"the HTTP server exited ({proc.returncode}) before it was ready")
                check(time.monotonic() < deadline, "no MCP URL in endpoint.json after 30 s")
                await asyncio.sleep(0.02)
        yield url
    except BaseException:
        await stop_process(proc)
        raise
    start = time.monotonic()
    termed = await stop_process(proc)
    took = time.monotonic() - start
    check(termed, "the HTTP server ignored SIGTERM for 10 s (killed)")
    check(proc.returncode == 0, f"the HTTP server exited {proc.returncode} on SIGTERM")
    check(not (home.dir / "endpoint.json").exists(), "the HTTP server did not shut down cleanly")
    passed(f"the HTTP server exited cleanly {took * 1000:.0f} ms after SIGTERM")


@contextlib.asynccontextmanager
async def session(name: str, home: Home, url: str | None, errlog: TextIO) -> AsyncIterator[tuple[Client, Seen]]:
    """A client session named `name`: over HTTP to `url`, else over stdio to its own server on `home`."""
    seen = Seen()
    push_stream = asyncio.Event()
    if url is not None:
        # Over HTTP, push travels on the session's standalone GET stream, which the SDK opens
        # alongside its `initialized` notification; rmcp drops what it pushes before that stream
        # is open. A response hook tells when it is, so each check starts with push in place.
        async def on_response(response: httpx2.Response) -> None:
            if response.request.method == "GET" and response.status_code == 200:
                push_stream.set()

        # The SDK's default timeouts (create_mcp_http_client): 30 s, 300 s to read a stream.
        # /mcp takes the home's bearer token, as hosts send it with their `headers` setting.
        token = (home.dir / "token").read_text().strip()
        http = httpx2.AsyncClient(
            timeout=httpx2.Timeout(30, read=300),
            event_hooks={"response": [on_response]},
            headers={"Authorization": f"Bearer {token}"},
        )
        transport = streamable_http_client(url, http_client=http)
    else:
        http = None
        push_stream.set()
        params = StdioServerParameters(
            command=str(home.bin), args=["--home", str(home.dir), "serve", "--no-listen"], env=SERVER_ENV
        )
        transport = stdio_client(params, errlog=errlog)
    # This script drives the 2025-11-25 session, the one with server push: the SDK's default
    # ("auto") would probe `server/discover`, which a client not named claude-code gets
    # answered, and then speak 2026-07-28 without a session (tests/integration/mcp_era.rs).
    client = Client(
        transport,
        mode="legacy",
        client_info=Implementation(name=name, version="1.0.0"),
        extensions=[ClaudeChannel(seen)],
        logging_callback=seen.on_log,
        read_timeout_seconds=60,
    )
    async with contextlib.AsyncExitStack() as stack:
        if http is not None:
            await stack.enter_async_context(http)
        await stack.enter_async_context(client)
        await within(ARRIVAL_S, push_stream.wait(), f"{name}: the SDK's GET stream for server push")
        yield client, seen
        closing = time.monotonic()
    if url is None:
        # The SDK closed the server's stdin and gives it STDIO_GRACE_S before it sends SIGTERM;
        # switchboard must exit on EOF by itself, and cleanly (it removes endpoint.json).
        took = time.monotonic() - closing
        check(took < STDIO_GRACE_S, f"{name}: the stdio server took {took:.2f} s to exit after EOF")
        passed(f"{name}: the stdio front end exited {took * 1000:.0f} ms after EOF")
        # The daemon it attached to keeps running (webhooks keep landing) with the session
        # closed; `switchboard stop` stops it cleanly.
        deadline = time.monotonic() + 5
        while True:
            status = json.loads(subprocess.run(
                [str(home.bin), "--home", str(home.dir), "status", "--json"],
                capture_output=True, text=True, env={**os.environ, **SERVER_ENV},
            ).stdout)
            if status.get("running") and status["stats"]["delivery"]["sessions"] == 0:
                break
            check(time.monotonic() < deadline, f"{name}: the daemon still counts the session: {status}")
            await asyncio.sleep(0.05)
        stopped = subprocess.run(
            [str(home.bin), "--home", str(home.dir), "stop"],
            capture_output=True, text=True, env={**os.environ, **SERVER_ENV},
        )
        check(stopped.returncode == 0, f"{name}: switchboard stop failed: {stopped.stderr}")
        check(not (home.dir / "endpoint.json").exists(), f"{name}: the daemon did not shut down cleanly")
        passed(f"{name}: the daemon kept running without the session, and stopped cleanly")


def tool_json(result: CallToolResult, tool: str) -> dict[str, Any]:
    """A switchboard tool result as JSON: structuredContent, which its text content repeats."""
    check(not result.is_error, f"{tool} returned an error: {result.content}")
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    check(texts, f"{tool}: no text content")
    from_text = json.loads(texts[0])
    if result.structured_content is not None:
        check(result.structured_content == from_text, f"{tool}: structuredContent differs from its text")
        return result.structured_content
    return from_text


async def wait_tool(client: Client, timeout_s: float) -> dict[str, Any]:
    result = await client.call_tool("wait_for_inbound_message", {"timeout_s": timeout_s, "max_items": 10})
    return tool_json(result, "wait_for_inbound_message")


async def wait_in_flight(client: Client) -> None:
    """Returns once the server reports a wait_for_inbound_message call waiting (inbox_stats)."""
    deadline = time.monotonic() + 10
    while True:
        result = await client.call_tool("inbox_stats", {})
        if tool_json(result, "inbox_stats").get("wait_calls_in_flight", 0) >= 1:
            return
        check(time.monotonic() < deadline, "the wait never showed as in flight in inbox_stats")
        await asyncio.sleep(0.02)


# Arguments each tool's input schema must accept; calling them changes nothing that the checks
# after them depend on (the confirm id does not exist, pause is undone at once).
SCHEMA_SAMPLES = [
    ("wait_for_inbound_message", {"timeout_s": 0.2, "max_items": 5}),
    ("inbox_pull", {"limit": 5, "mark_read": False}),
    ("channel_list", {"limit": 5}),
    ("channel_ack", {}),
    ("channel_confirm", {"id": 999999, "decision": "no"}),
    ("channel_run", {"seq": 999999}),
    ("channel_reply", {"seq": 999999, "text": "on it"}),
    ("channel_pause", {}),
    ("channel_resume", {}),
    ("rules_list", {}),
    ("rules_reload", {}),
    ("inbox_stats", {}),
]


async def check_every_schema(client: Client, tools: dict[str, Any]) -> None:
    """Every tool's input and output schema is a valid JSON Schema (2020-12, which MCP
    names), accepts a real call's arguments and result (a refusal's too), and refuses what it
    should."""
    import jsonschema

    check({n for n, _ in SCHEMA_SAMPLES} == set(tools), "a sample for every tool")
    validator = jsonschema.Draft202012Validator
    for name, arguments in SCHEMA_SAMPLES:
        tool = tools[name]
        validator.check_schema(tool.input_schema)
        check(tool.output_schema is not None, f"{name}: no output schema")
        validator.check_schema(tool.output_schema)
        errors = list(validator(tool.input_schema).iter_errors(arguments))
        check(not errors, f"{name}: its input schema refuses {arguments}: {errors}")
        result = await client.call_tool(name, arguments)
        check(result.structured_content is not None, f"{name}: no structuredContent")
        errors = list(validator(tool.output_schema).iter_errors(result.structured_content))
        check(not errors, f"{name}: its output schema refuses the result: {errors}")
    confirm = validator(tools["channel_confirm"].input_schema)
    check(not confirm.is_valid({"id": 1}), "channel_confirm's schema requires `decision`")
    check(not confirm.is_valid({"id": 1, "decision": "maybe"}), "decision is yes or no")
    passed(f"every tool's input and output schema is valid 2020-12 and holds for a real call ({len(tools)})")


# --- the checks --------------------------------------------------------------------------------


async def run(bin_path: Path, transport: str, tmp: Path) -> None:
    version = importlib.metadata.version("mcp")
    check(version == SDK_VERSION, f"mcp {SDK_VERSION} expected, this is mcp {version}")
    passed(f"python {sys.version.split()[0]}, mcp {version}, transport {transport}")

    home = Home(bin_path, tmp / "home")
    home.dir.mkdir()
    # Over stdio a home has one server (it is locked), so the second session gets its own.
    other = Home(bin_path, tmp / "home-copilot") if transport == "stdio" else home
    other.dir.mkdir(exist_ok=True)

    async with contextlib.AsyncExitStack() as stack:
        errlog = stack.enter_context(open(tmp / "stdio-server.log", "a"))
        url = None
        if transport == "http":
            url = await stack.enter_async_context(http_server(home))
            passed(f"HTTP server up at {url}")

        claude, claude_seen = await stack.enter_async_context(session("claude-code", home, url, errlog))
        info = claude.server_info
        check(info is not None and info.name == "switchboard", f"serverInfo name: {info}")
        check(claude.protocol_version == PROTOCOL, f"protocol {claude.protocol_version}, want {PROTOCOL}")
        experimental = claude.server_capabilities.experimental or {}
        check("claude/channel" in experimental, f"no claude/channel capability: {experimental}")
        check("wait_for_inbound_message" in (claude.instructions or ""), "instructions do not explain the wait loop")
        passed(f"initialize as claude-code: serverInfo {info.name} {info.version}, protocol {PROTOCOL}")

        tools = {t.name: t for t in (await claude.list_tools()).tools}
        missing = [t for t in TOOLS if t not in tools]
        check(not missing, f"tools missing: {missing} (listed: {sorted(tools)})")
        for t in tools.values():
            check(t.input_schema.get("type") == "object", f"{t.name}: input schema is not an object")
        wait_props = tools["wait_for_inbound_message"].input_schema.get("properties", {})
        check({"timeout_s", "max_items"} <= set(wait_props), f"wait_for_inbound_message properties: {wait_props}")
        passed(f"tools/list: {len(tools)} tools, all {len(TOOLS)} of the design's, object schemas")
        await check_every_schema(claude, tools)

        start = time.monotonic()
        empty = await wait_tool(claude, 1)
        took = time.monotonic() - start
        check(empty.get("items") == [], f"a wait with nothing queued returned {empty}")
        check(0.9 <= took < 5, f"a 1 s wait returned after {took:.2f} s")
        passed(f"long-poll times out empty after {took:.2f} s")

        start = time.monotonic()
        pending = asyncio.create_task(wait_tool(claude, 20))
        await wait_in_flight(claude)
        check(not pending.done(), "the 20 s wait returned before any message was sent")
        sent_at = time.monotonic()
        await home.send(CHANNEL, TEXT)
        got = await within(25, pending, "the pending wait_for_inbound_message")
        woke, took = time.monotonic() - sent_at, time.monotonic() - start
        items = got.get("items")
        check(isinstance(items, list) and len(items) == 1, f"one item expected: {got}")
        item = items[0]
        check(item.get("kind") == "nudge", f"kind nudge expected: {item}")
        message = item.get("message") or {}
        check(message.get("channel") == CHANNEL, f"channel {CHANNEL} expected: {item}")
        check(message.get("content") == TEXT, f"content {TEXT!r} expected: {item}")
        check(took < 10 and woke < 5, f"the wait woke {woke:.2f} s after the send ({took:.2f} s in all)")
        seq = message.get("seq")
        check(isinstance(seq, int), f"message seq: {message}")
        passed(f"long-poll woke {woke * 1000:.0f} ms after `switchboard send`: nudge {CHANNEL} seq {seq}")

        push = await claude_seen.channel_push(seq)
        check(isinstance(push.content, str) and push.content, f"channel content is not a string: {push!r}")
        check(TEXT in push.content, f"channel content does not carry the message: {push.content!r}")
        meta = push.meta
        check(isinstance(meta, dict), f"channel meta is not a map: {meta!r}")
        bad = {k: v for k, v in meta.items() if not isinstance(v, str)}
        check(not bad, f"channel meta values must be strings: {bad}")
        check(meta.get("channel") == CHANNEL, f"meta channel: {meta}")
        check(meta.get("seq") == str(seq), f"meta seq: {meta}")
        passed(f"{CLAUDE_CHANNEL} via the client extension binding: meta {meta}")

        copilot, copilot_seen = await stack.enter_async_context(session("copilot-cli", other, url, errlog))
        check(copilot.server_info is not None and copilot.server_info.name == "switchboard", "copilot-cli session")
        await other.send(CHANNEL, SECOND_TEXT)
        second = await wait_tool(copilot, 10)
        contents = [i.get("message", {}).get("content") for i in second.get("items", [])]
        check(SECOND_TEXT in contents, f"copilot-cli's wait did not return the new message: {second}")
        second_seq = next(i["message"]["seq"] for i in second["items"] if i["message"]["content"] == SECOND_TEXT)
        log = await copilot_seen.inbox_log(second_seq)
        if url is not None:
            # Same server: the claude-code session does get the push for this message.
            await claude_seen.channel_push(second_seq)
        await asyncio.sleep(QUIET_WINDOW_S)
        check(
            not copilot_seen.channel,
            f"copilot-cli received {CLAUDE_CHANNEL}: {[p.model_dump() for p in copilot_seen.channel]}",
        )
        passed(
            f"copilot-cli got notifications/message ({log.logger}, seq {second_seq}) and no {CLAUDE_CHANNEL}"
            f" in {QUIET_WINDOW_S:g} s after it"
            + (", while claude-code on the same server did" if url is not None else "")
        )
        if url is not None:
            # Two windows of the same host on one server: two sessions, two consumers, and each
            # gets every nudge once.
            twin_a, _ = await stack.enter_async_context(session("copilot-cli", home, url, errlog))
            twin_b, _ = await stack.enter_async_context(session("copilot-cli", home, url, errlog))
            await home.send(CHANNEL, "for both windows")
            for twin in (twin_a, twin_b):
                got = await wait_tool(twin, 10)
                contents = [i.get("message", {}).get("content") for i in got.get("items", [])]
                check(contents == ["for both windows"], f"a copilot-cli window got {contents}")
                again = await wait_tool(twin, 0.2)
                check(again.get("items") == [], f"a nudge came twice: {again}")
            names = {tool_json(await twin.call_tool("inbox_stats", {}), "inbox_stats")["consumer"]["name"]
                     for twin in (twin_a, twin_b)}
            check(len(names) == 2, f"two sessions named alike share a consumer: {names}")
            passed(f"two copilot-cli sessions each got the nudge once, as consumers {sorted(names)}")
    passed("sessions closed, servers stopped")


def failures(exc: BaseException) -> list[BaseException]:
    """The leaf exceptions of a (possibly nested) exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in failures(e)]
    return [exc]


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(none)"


def main() -> int:
    # The SDK's own log lines (warnings and up), labelled as such. It warns "Session termination
    # failed" unless the session DELETE is answered 200 or 204 (the test asserts it is not).
    logging.basicConfig(level=logging.WARNING, format="sdk  %(name)s %(levelname)s: %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, type=Path, help="the switchboard binary")
    parser.add_argument("--transport", required=True, choices=["stdio", "http"])
    args = parser.parse_args()
    bin_path = args.bin.resolve()
    if not os.access(bin_path, os.X_OK):
        print(f"FAIL {bin_path} is not an executable", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="switchboard-py-e2e-") as tmp:
        try:
            asyncio.run(asyncio.wait_for(run(bin_path, args.transport, Path(tmp)), TOTAL_S))
            return 0
        except BaseException as exc:  # noqa: BLE001 - report every failure, then exit 1
            for leaf in failures(exc):
                if isinstance(leaf, CheckFailed):
                    print(f"FAIL {leaf}", file=sys.stderr)
                elif isinstance(leaf, TimeoutError):
                    print(f"FAIL the whole run took over {TOTAL_S:g} s", file=sys.stderr)
                else:
                    print("FAIL unexpected error:", file=sys.stderr)
                    traceback.print_exception(leaf, file=sys.stderr)
            for name in ["home/server.log", "home-copilot/server.log", "stdio-server.log"]:
                path = Path(tmp) / name
                if path.exists():
                    print(f"--- {name} (last 40 lines) ---\n{tail(path)}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
