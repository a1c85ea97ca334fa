#!/usr/bin/env python3
"""A minimal stdio MCP server (standard library only) that floods its client.

Answers `initialize` (protocol 2025-11-25, no tools), then on `notifications/initialized`
writes N `notifications/flood` lines (N = argv[1]) as fast as the pipe takes them, and
stays until stdin closes. The write blocks when the client stops reading, which is how
switchboard's backpressure reaches an upstream. Used by the throughput bench in
tests/integration/upstream.rs, where the official SDK's per-notification cost would be the
bottleneck instead of switchboard.
"""

import json
import sys

N = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
out = sys.stdout.buffer

for line in sys.stdin.buffer:
    msg = json.loads(line)
    if msg.get("method") == "initialize":
        reply = {
            "jsonrpc": "2.0",
            "id": msg["id"],
            "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "serverInfo": {"name": "raw-flood", "version": "1.0.0"},
            },
        }
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()
    elif msg.get("method") == "notifications/initialized":
        chunk = []
        for i in range(N):
            chunk.append(b'{"jsonrpc":"2.0","method":"notifications/flood","params":{"i":%d}}\n' % i)
            if len(chunk) == 1000:
                out.write(b"".join(chunk))
                chunk = []
        out.write(b"".join(chunk))
        out.flush()
    elif "id" in msg and "method" in msg:
        out.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {}}).encode() + b"\n")
        out.flush()
