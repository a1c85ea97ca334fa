"""An MCP Events server upstream of switchboard, speaking raw JSON-RPC on stdio, written from
the draft (modelcontextprotocol/experimental-ext-triggers-events,
docs/design-sketch-proposal.md): `initialize`, `events/list` (one type, `ticket.created`,
delivery push and poll), `events/stream` (`notifications/events/active`, `event`,
`heartbeat`, each with `_meta["io.modelcontextprotocol/subscriptionId"]`) and `events/poll`.

Its upstream is a file, FEED: one ticket title per line; the cursor is the number of lines
delivered, so a cursor resumes exactly. Every request is logged to FEED + ".requests", and so
is each stream's start (`{"active": cursor}`) once it is fixed.

usage: events_upstream.py FEED
"""

import json
import sys
import threading
import time

FEED = sys.argv[1]
META = "io.modelcontextprotocol/subscriptionId"
out_lock = threading.Lock()


def send(msg):
    with out_lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def lines():
    try:
        with open(FEED) as f:
            return [l.rstrip("\n") for l in f if l.strip()]
    except OSError:
        return []


def occurrence(i, title):
    return {"eventId": f"tkt-{i}", "name": "ticket.created",
            "timestamp": "2026-11-29T00:00:00Z", "data": {"title": title, "number": i},
            "cursor": str(i)}


def stream(req_id, cursor):
    sent = int(cursor) if cursor is not None else len(lines())
    send({"jsonrpc": "2.0", "method": "notifications/events/active",
          "params": {"cursor": str(sent), "truncated": False, "_meta": {META: req_id}}})
    # Logged once the stream's starting point is fixed: a line added after this is delivered.
    with open(FEED + ".requests", "a") as log:
        log.write(json.dumps({"active": str(sent)}) + "\n")
    quiet = time.time()
    while True:
        now = lines()
        while sent < len(now):
            sent += 1
            ev = occurrence(sent, now[sent - 1])
            ev["_meta"] = {META: req_id}
            send({"jsonrpc": "2.0", "method": "notifications/events/event", "params": ev})
            quiet = time.time()
        if time.time() - quiet > 1:
            send({"jsonrpc": "2.0", "method": "notifications/events/heartbeat",
                  "params": {"cursor": str(sent), "_meta": {META: req_id}}})
            quiet = time.time()
        time.sleep(0.05)


for raw in sys.stdin:
    msg = json.loads(raw)
    with open(FEED + ".requests", "a") as log:
        log.write(json.dumps(msg) + "\n")
    method, rid = msg.get("method"), msg.get("id")
    params = msg.get("params") or {}
    if rid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"events": {"listChanged": True}, "tools": {}},
            "serverInfo": {"name": "tickets", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": []}})
    elif method == "events/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"events": [{
            "name": "ticket.created", "description": "A ticket was opened",
            "delivery": ["push", "poll"], "inputSchema": {"type": "object"},
            "payloadSchema": {"type": "object"}}]}})
    elif method == "events/stream":
        threading.Thread(target=stream, args=(rid, params.get("cursor")), daemon=True).start()
    elif method == "events/poll":
        now = lines()
        cursor = params.get("cursor")
        start = int(cursor) if cursor is not None else len(now)
        evs = [occurrence(i + 1, now[i]) for i in range(start, len(now))]
        for e in evs:
            del e["cursor"]
        send({"jsonrpc": "2.0", "id": rid, "result": {"events": evs, "cursor": str(len(now)),
              "truncated": False, "hasMore": False, "nextPollMs": 1000}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
