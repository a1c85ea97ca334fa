// A client that speaks only MCP 2026-07-28: the TypeScript SDK v2 (`@modelcontextprotocol/client`),
// pinned to that revision (no fallback to `initialize`), against switchboard's `/mcp`.
//
//   node ts_sdk_v2.mjs --client DIR --url URL --token TOKEN --home HOME --bin SWITCHBOARD
//
// Prints one line per check passed; exits non-zero on the first failure.

import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import assert from "node:assert/strict";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) {
  args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
}
const sdk = await import(
  pathToFileURL(join(args.client, "@modelcontextprotocol/client/dist/index.mjs")).href
);
const { Client, StreamableHTTPClientTransport } = sdk;

const run = promisify(execFile);
async function send(channel, text) {
  await run(args.bin, ["--home", args.home, "send", "--channel", channel, text]);
}

const client = new Client(
  { name: "ts-sdk-v2", version: "2.4.0" },
  {
    capabilities: { elicitation: { form: {} } },
    versionNegotiation: { mode: { pin: "2026-07-28" } },
  },
);
let forms = 0;
client.setRequestHandler("elicitation/create", async (request) => {
  forms += 1;
  assert.match(request.params.message, /v9\.9\.9/);
  return { action: "accept", content: { decision: "approve" } };
});
const transport = new StreamableHTTPClientTransport(new URL(args.url), {
  requestInit: { headers: { Authorization: `Bearer ${args.token}` } },
});
await client.connect(transport);
assert.equal(transport.protocolVersion ?? "2026-07-28", "2026-07-28");
assert.equal(transport.sessionId, undefined, "no session in 2026-07-28");
console.log("connected on 2026-07-28 without a session");

const { tools } = await client.listTools();
const names = tools.map((t) => t.name);
assert.ok(names.includes("wait_for_inbound_message"), names.join(", "));
assert.ok(names.includes("channel_confirm"), names.join(", "));
console.log(`listed ${tools.length} tools`);

// Nothing queued: the wait comes back empty.
const empty = await client.callTool({
  name: "wait_for_inbound_message",
  arguments: { timeout_s: 0 },
});
assert.deepEqual(empty.structuredContent.items, []);

// A long tool call on one POST, woken by a message that arrives meanwhile.
const started = Date.now();
const waiting = client.callTool(
  { name: "wait_for_inbound_message", arguments: { timeout_s: 30 } },
  undefined,
  { timeout: 60_000 },
);
setTimeout(() => send("work/v2", "job-from-v2").catch((e) => console.error(e)), 700);
const woken = await waiting;
const items = woken.structuredContent.items;
assert.equal(items.length, 1, JSON.stringify(woken.structuredContent));
assert.equal(items[0].kind, "auto");
assert.match(items[0].prompt, /job-from-v2/);
assert.ok(Date.now() - started < 25_000, "woken before the timeout");
console.log("woken by a wait");

// A confirm: asked through an input_required result, answered by the elicitation handler,
// and the approved work comes with the next wait.
await send("deploy/v2", "v9.9.9");
const asked = await client.callTool({
  name: "wait_for_inbound_message",
  arguments: { timeout_s: 10 },
});
assert.equal(forms, 1, JSON.stringify(asked.structuredContent));
assert.match(asked.structuredContent.note, /approved in the form/);
const approved = await client.callTool({
  name: "wait_for_inbound_message",
  arguments: { timeout_s: 10 },
});
assert.equal(approved.structuredContent.items[0].kind, "approved");
assert.match(approved.structuredContent.items[0].prompt, /Deploy v9\.9\.9/);
console.log("a confirm answered through input_required");

await client.close();
