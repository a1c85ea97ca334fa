"""A minimal MCP client over streamable HTTP for the bench scripts (python3, standard library only).

One JSON-RPC request per connection: a result comes back as JSON or as a server-sent event stream,
whichever the server picks. `benches/wake_latency.sh` and `benches/soak.sh` import it.
"""
import http.client, json, urllib.parse


class Session:
    """One initialized MCP session at `url`, authorized by `token`."""

    def __init__(self, url, token, name):
        self.url = urllib.parse.urlsplit(url)
        self.base = {"Authorization": "Bearer " + token, "Content-Type": "application/json",
                     "Accept": "application/json, text/event-stream"}
        self.session = None
        self.ids = iter(range(1, 1 << 30))
        self.rpc({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": name, "version": "1"}}})
        self.rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def rpc(self, body):
        """One JSON-RPC request on a fresh connection; returns the response with its id."""
        conn = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=60)
        headers = dict(self.base)
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        conn.request("POST", self.url.path, json.dumps(body), headers)
        resp = conn.getresponse()
        self.session = resp.getheader("Mcp-Session-Id") or self.session
        result = None
        if "id" in body and "json" in (resp.getheader("Content-Type") or ""):
            result = json.loads(resp.read() or b"null")
        elif "id" in body:
            for raw in resp:
                line = raw.decode().strip()
                if line.startswith("data:") and line[5:].strip():
                    msg = json.loads(line[5:])
                    if msg.get("id") == body["id"]:
                        result = msg
                        break
        conn.close()
        return result

    def wait(self, timeout_s=20):
        """`wait_for_inbound_message` (up to `timeout_s`, 50 items); the items it returned."""
        r = self.rpc({"jsonrpc": "2.0", "id": next(self.ids), "method": "tools/call", "params": {
            "name": "wait_for_inbound_message", "arguments": {"timeout_s": timeout_s, "max_items": 50}}})
        content = (r or {}).get("result", {}).get("structuredContent") or {}
        return content.get("items", [])
