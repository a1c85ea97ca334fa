"""A webhook endpoint for switchboard's MCP Events deliveries, written from the draft
(modelcontextprotocol/experimental-ext-triggers-events, docs/design-sketch-proposal.md,
"Webhook Event Delivery", "Non-event webhook bodies", "Endpoint verification").

Every POST is verified with the `standardwebhooks` package (the Standard Webhooks reference
verifier) under the secret given, and recorded as one JSON line in LOG: its headers, body,
and whether the signature verified. A `verification` envelope is answered by echoing its
challenge (mode `echo`) or not (mode `noecho`); in mode `fail` every event POST gets 503.
The mode is read from MODE_FILE at each request, so the test can change it.

usage: webhook_receiver.py PORT_FILE LOG SECRET MODE_FILE
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

PORT_FILE, LOG, SECRET, MODE_FILE = sys.argv[1:5]


def mode():
    try:
        with open(MODE_FILE) as f:
            return f.read().strip() or "echo"
    except OSError:
        return "echo"


class Hook(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            Webhook(SECRET).verify(raw, headers)
            verified = True
        except Exception as e:  # the verifier's refusal, recorded
            verified = False
            headers["verify-error"] = repr(e)
        body = json.loads(raw)
        m = mode()
        if not verified:
            status, answer = 401, {}
        elif body.get("type") == "verification":
            echo = body["challenge"] if m != "noecho" else "not-it"
            status, answer = 200, {"challenge": echo}
        elif m == "fail":
            status, answer = 503, {}
        else:
            status, answer = 200, {}
        record = {"headers": headers, "body": body, "verified": verified, "status": status}
        with open(LOG, "a") as f:
            f.write(json.dumps(record) + "\n")
        return self.answer(status, answer)


server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os

os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
