#!/usr/bin/env python3
"""Confirm requests put to the user as elicitation forms, driven by the official Python MCP SDK
(mcp 2.3.0) as the client, with an elicitation callback, against the real binary.

Run by `cargo test` (tests/integration/approvals.rs) in the venv of the Python SDK tests, or:

    python tests/python/elicitation.py --bin target/debug/switchboard --transport stdio
    python tests/python/elicitation.py --bin target/debug/switchboard --transport http

One home, one client session (`claude-code`) that keeps a `wait_for_inbound_message` in flight
as an agent does. Checks, each reported on stderr:

- approve: a confirm arriving while the wait is in flight comes back in the wait's result, and
  a form asks the user (rule, channel, fenced excerpt marked untrusted, prompt, tools, time
  left; one required choice approve|deny); `accept` + approve answers it `via: elicitation`
  (`pending --closed`, actions.jsonl) and the approved prompt reaches the next wait;
- deny: answered `denied via elicitation`;
- decline, cancel: the confirm stays pending;
- a rule whose `approveVia` leaves out `elicitation`: no form;
- an answer from the CLI while the form is open: the form is cancelled
  (`notifications/cancelled`), the CLI's answer stands;
- a later message that resolves the confirm (`resolveRegex`, `resolveKey`) while the form is
  open: the form is cancelled, `pending --closed` says it was resolved by that message;
- expiry while the form is open: the form is cancelled, the confirm ends expired;
- over HTTP: every form rode the stream of the wait it relates to (rmcp logs when it cannot).

Exit status 0 when every check passed, 1 (with the reason on stderr) otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pwd
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitResult, Implementation

# The checks' helpers and the HTTP server of the SDK end-to-end test, beside this script.
from mcp_sdk_e2e import CheckFailed, check, http_server, passed, within

ARRIVAL_S = 10.0
TOTAL_S = 100.0
# How long a form must stay away when none should come.
QUIET_WINDOW_S = 1.5
SERVER_ENV = {"RUST_LOG": "switchboard=debug,info"}

RULES = {
    "rules": [
        {
            "name": "ask",
            "channel": "alerts/*",
            "mode": "confirm",
            "prompt": "Investigate: {{content}}",
            "tools": ["view", "grep"],
            "approveVia": ["cli", "elicitation"],
        },
        {
            "name": "short",
            "channel": "short/*",
            "mode": "confirm",
            "prompt": "Look: {{content}}",
            "confirmTimeout": "2s",
        },
        {
            "name": "fix",
            "channel": "fix/*",
            "contentRegex": "^disk",
            "mode": "confirm",
            "prompt": "Clean up: {{content}}",
            "approveVia": ["cli", "elicitation"],
            "resolveRegex": "^\\[RESOLVED\\]",
            "resolveKey": "{{channel}}",
        },
        {
            "name": "cli-only",
            "channel": "ci/*",
            "mode": "confirm",
            "prompt": "Fix: {{content}}",
            "approveVia": ["cli"],
        },
    ]
}


@dataclass
class Form:
    """One form the server put to the user: its params, and how the test answers it."""

    message: str
    schema: dict[str, Any]
    answer: asyncio.Future[ElicitResult]
    cancelled: asyncio.Event


class User:
    """The elicitation callback: each form waits for the test to answer it."""

    def __init__(self) -> None:
        self.forms: asyncio.Queue[Form] = asyncio.Queue()

    async def callback(self, context: Any, params: Any) -> ElicitResult:
        form = Form(
            message=params.message,
            schema=params.requested_schema if isinstance(params.requested_schema, dict)
            else params.requested_schema.model_dump(by_alias=True, exclude_none=True),
            answer=asyncio.get_running_loop().create_future(),
            cancelled=asyncio.Event(),
        )
        await self.forms.put(form)
        try:
            return await form.answer
        except asyncio.CancelledError:
            form.cancelled.set()
            raise

    async def next_form(self, what: str) -> Form:
        return await within(ARRIVAL_S, self.forms.get(), what)

    async def no_form(self, what: str) -> None:
        try:
            form = await asyncio.wait_for(self.forms.get(), QUIET_WINDOW_S)
        except TimeoutError:
            return
        raise CheckFailed(f"{what}: a form came: {form.message!r}")


@dataclass
class Home:
    bin: Path
    dir: Path

    @property
    def log(self) -> Path:
        """The server's log (its stderr)."""
        return self.dir / "server.log"

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            [str(self.bin), "--home", str(self.dir), *args],
            capture_output=True,
            text=True,
            env={**os.environ, **SERVER_ENV},
            timeout=ARRIVAL_S,
        )
        check(out.returncode == 0, f"switchboard {' '.join(args)} exited {out.returncode}: {out.stderr}")
        return out.stdout

    def send(self, channel: str, text: str) -> None:
        self.cli("send", "--channel", channel, text)

    def pending_ids(self) -> list[int]:
        return [p["id"] for p in json.loads(self.cli("pending", "--json"))]

    def closed(self, id: int) -> str:
        """The `pending --closed` line of confirm `id`."""
        closed = json.loads(self.cli("pending", "--closed", "--json"))["closed"]
        if not any(c["id"] == id for c in closed):
            return ""
        for line in self.cli("pending", "--closed").splitlines():
            # A pending confirm's line says `seq N, TIME left`; a closed one's how it ended.
            if line.startswith(f"#{id} [") and " seq " not in line:
                return line
        raise CheckFailed(f"confirm {id} is closed but `pending --closed` has no line for it")

    def log_lines(self, needle: str) -> str:
        """The lines of the stdio server's log that contain `needle`."""
        text = self.log.read_text(errors="replace")
        return "\n".join(line for line in text.splitlines() if needle in line)

    def journal(self, id: int) -> list[dict[str, Any]]:
        records = []
        for line in (self.dir / "actions.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r.get("id") == id:
                records.append(r)
        return records


def tool_json(result: CallToolResult, tool: str) -> dict[str, Any]:
    check(not result.is_error, f"{tool} returned an error: {result.content}")
    check(result.structured_content is not None, f"{tool}: no structuredContent")
    return result.structured_content


async def wait_tool(client: Client, timeout_s: float) -> dict[str, Any]:
    result = await client.call_tool("wait_for_inbound_message", {"timeout_s": timeout_s, "max_items": 10})
    return tool_json(result, "wait_for_inbound_message")


async def wait_in_flight(client: Client) -> None:
    """Returns once the server reports a wait_for_inbound_message call waiting."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ARRIVAL_S
    while True:
        stats = tool_json(await client.call_tool("inbox_stats", {}), "inbox_stats")
        if stats.get("wait_calls_in_flight", 0) >= 1:
            return
        check(loop.time() < deadline, "the wait never showed as in flight in inbox_stats")
        await asyncio.sleep(0.02)


async def confirm_with_form(client: Client, user: User, home: Home, channel: str, text: str) -> tuple[int, Form]:
    """Sends `text` on `channel` while a wait is in flight: the wait returns its confirm
    request at once (the form does not hold it up), and the form for it comes."""
    waiting = asyncio.create_task(wait_tool(client, 20))
    await wait_in_flight(client)
    home.send(channel, text)
    result = await within(ARRIVAL_S, waiting, f"the wait returns the confirm of {text!r}")
    confirms = [i for i in result["items"] if i["kind"] == "confirm_request"]
    check(len(confirms) == 1, f"one confirm_request in the wait's result: {result}")
    id = confirms[0]["action_id"]
    form = await user.next_form(f"the form for confirm {id}")
    check(f"confirm #{id}?" in form.message, f"the form names confirm {id}: {form.message!r}")
    return id, form


async def run(bin: Path, transport: str) -> None:
    with tempfile.TemporaryDirectory(prefix="sb-elicit-") as tmp:
        home = Home(bin=bin, dir=Path(tmp))
        (home.dir / "triggers.json").write_text(json.dumps(RULES))
        user = User()
        if transport == "http":
            # `serve --no-stdio --no-listen --http 127.0.0.1:0`, stopped with SIGTERM.
            async with http_server(home) as url:
                token = (home.dir / "token").read_text().strip()
                http = httpx2.AsyncClient(
                    timeout=httpx2.Timeout(30, read=300), headers={"Authorization": f"Bearer {token}"}
                )
                async with http:
                    client = Client(
                        streamable_http_client(url, http_client=http),
                        client_info=Implementation(name="claude-code", version="1.0.0"),
                        elicitation_callback=user.callback,
                        read_timeout_seconds=60,
                    )
                    async with client:
                        await scenarios(client, user, home)
            # rmcp says so when a request it should send on its originating request's stream
            # cannot be (the wait had ended): every form rode its wait's stream.
            fallback = home.log_lines("falling back to standalone stream")
            check(not fallback, f"a form did not ride its wait's stream: {fallback}")
            passed("every form was sent on the stream of the wait it relates to")
            return
        errlog = open(home.log, "w")
        params = StdioServerParameters(
            command=str(bin), args=["--home", str(home.dir), "serve", "--no-listen"], env=SERVER_ENV
        )
        client = Client(
            stdio_client(params, errlog=errlog),
            client_info=Implementation(name="claude-code", version="1.0.0"),
            elicitation_callback=user.callback,
            read_timeout_seconds=60,
        )
        try:
            async with client:
                await scenarios(client, user, home)
        finally:
            errlog.close()
            with contextlib.suppress(Exception):
                home.cli("stop")


async def scenarios(client: Client, user: User, home: Home) -> None:
    # --- approve -------------------------------------------------------------------------------
    id, form = await confirm_with_form(client, user, home, "alerts/db", "db down on db-1")
    text = form.message
    for part in [
        "Rule: ask\n",
        "Channel: alerts/db\n",
        "Time left: ",
        "The message (untrusted text from outside; it grants no permission):\n```text\ndb down on db-1\n```",
        "the agent runs this prompt:\n```text\nInvestigate: db down on db-1\n```",
        "using only these tools: view, grep",
    ]:
        check(part in text, f"the form says {part!r}: {text!r}")
    check(form.schema.get("required") == ["decision"], f"one required field: {form.schema}")
    check(
        form.schema["properties"]["decision"].get("enum") == ["approve", "deny"],
        f"the choice is approve or deny: {form.schema}",
    )
    passed(f"confirm {id}: the form shows rule, channel, fenced untrusted excerpt, prompt, tools, time left")
    form.answer.set_result(ElicitResult(action="accept", content={"decision": "approve"}))
    result = await within(ARRIVAL_S, wait_tool(client, 10), "the next wait")
    approved = [i for i in result["items"] if i["kind"] == "approved" and i["action_id"] == id]
    check(approved, f"the approved prompt reached the next wait: {result}")
    check(approved[0]["prompt"] == "Investigate: db down on db-1", f"its prompt: {approved[0]}")
    check(approved[0]["tools"] == ["view", "grep"], f"its tools: {approved[0]}")
    line = home.closed(id)
    check(" approved via elicitation by claude-code" in line, f"pending --closed says how: {line!r}")
    vias = [r.get("via") for r in home.journal(id) if r.get("state") == "approved"]
    check(vias == ["elicitation"], f"actions.jsonl records via elicitation: {home.journal(id)}")
    passed(f"confirm {id}: approved in the form ({line.strip()}), the prompt reached the next wait")

    # --- deny ----------------------------------------------------------------------------------
    id, form = await confirm_with_form(client, user, home, "alerts/db", "db slow")
    form.answer.set_result(ElicitResult(action="accept", content={"decision": "deny"}))
    line = await eventually(lambda: home.closed(id), f"confirm {id} closed")
    check(" denied via elicitation by claude-code" in line, f"pending --closed: {line!r}")
    passed(f"confirm {id}: denied in the form ({line.strip()})")

    # --- decline and cancel leave it pending -----------------------------------------------------
    for action in ["decline", "cancel"]:
        id, form = await confirm_with_form(client, user, home, "alerts/db", f"db {action}")
        form.answer.set_result(ElicitResult(action=action))
        # The front end logs how the form ended once it has handled the answer.
        word = {"decline": "declined", "cancel": "cancelled"}[action]
        await eventually(
            lambda: f"action_id={id}" in home.log_lines(f"the form was {word}; left pending"),
            f"the server handled the {action} of confirm {id}",
        )
        check(id in home.pending_ids(), f"{action}: confirm {id} still pending: {home.pending_ids()}")
        check(home.closed(id) == "", f"{action}: confirm {id} not closed: {home.closed(id)!r}")
        passed(f"confirm {id}: {action} in the form leaves it pending")

    # --- a rule whose approveVia leaves out elicitation: no form -----------------------------------
    waiting = asyncio.create_task(wait_tool(client, 20))
    await wait_in_flight(client)
    home.send("ci/main", "build broke")
    result = await within(ARRIVAL_S, waiting, "the wait returns the cli-only confirm")
    cli_only = [i["action_id"] for i in result["items"] if i["kind"] == "confirm_request"]
    check(len(cli_only) == 1, f"one confirm_request: {result}")
    await user.no_form(f"confirm {cli_only[0]} (approveVia cli only)")
    passed(f"confirm {cli_only[0]}: approveVia [cli] puts no form to the user")

    # --- the CLI answers while the form is open -------------------------------------------------
    id, form = await confirm_with_form(client, user, home, "alerts/db", "db answered at a terminal")
    home.cli("confirm", str(id), "yes")
    await within(ARRIVAL_S, form.cancelled.wait(), f"the form of confirm {id} is cancelled")
    line = home.closed(id)
    check(f" approved via cli by {pwd.getpwuid(os.getuid()).pw_name}" in line, f"the CLI's answer stands, by this user: {line!r}")
    result = await within(ARRIVAL_S, wait_tool(client, 10), "the next wait")
    check(
        any(i["kind"] == "approved" and i["action_id"] == id for i in result["items"]),
        f"the CLI-approved prompt reached the next wait: {result}",
    )
    passed(f"confirm {id}: answered at the CLI while the form was open; the form was cancelled")

    # --- a later message resolves the confirm while the form is open ----------------------------
    id, form = await confirm_with_form(client, user, home, "fix/db", "disk full on db-1")
    home.send("fix/db", "[RESOLVED] disk full on db-1")
    await within(ARRIVAL_S, form.cancelled.wait(), f"the form of confirm {id} is cancelled when it is resolved")
    line = await eventually(lambda: home.closed(id), f"confirm {id} closed")
    check(" resolved by message " in line, f"pending --closed says how it ended: {line!r}")
    passed(f"confirm {id}: resolved by a later message while the form was open; the form was cancelled")

    # --- the confirm expires while the form is open ---------------------------------------------
    id, form = await confirm_with_form(client, user, home, "short/x", "expires soon")
    check("Time left: 1s" in form.message or "Time left: 2s" in form.message, f"time left: {form.message!r}")
    await within(ARRIVAL_S, form.cancelled.wait(), f"the form of confirm {id} is cancelled on expiry")
    line = home.closed(id)
    check(" expired unanswered" in line, f"pending --closed: {line!r}")
    passed(f"confirm {id}: expired while the form was open; the form was cancelled")


async def eventually(get: Any, what: str) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ARRIVAL_S
    while True:
        value = get()
        if value:
            return value
        check(loop.time() < deadline, f"timed out: {what}")
        await asyncio.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True, type=Path)
    parser.add_argument("--transport", default="stdio", choices=["stdio", "http"])
    args = parser.parse_args()
    try:
        asyncio.run(asyncio.wait_for(run(args.bin.resolve(), args.transport), TOTAL_S))
    except CheckFailed as e:
        print(f"FAIL {e}", file=sys.stderr, flush=True)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
