// The MCP server through the official TypeScript SDK, over streamable HTTP, against a running
// `switchboard serve --http` (started by tests/integration/ts_sdk.rs).
//
//   node tests/node/ts_sdk_e2e.mjs --sdk DIR/node_modules --old-sdk DIR2/node_modules \
//        --url http://127.0.0.1:PORT/mcp --token TOKEN --home HOME --bin target/debug/switchboard
//
// Every check prints `ok - ...`; the first failure prints `not ok - ...` and exits 1. Every tool
// call goes through the SDK's own output-schema validation (our tools declare outputSchema).

import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].slice(2)] = process.argv[i + 1];

function fail(what) {
  console.log(`not ok - ${what}`);
  process.exit(1);
}
function ok(what) {
  console.log(`ok - ${what}`);
}
function check(cond, what) {
  if (!cond) fail(what);
}

async function loadSdk(root) {
  const at = (p) => import(pathToFileURL(join(root, "@modelcontextprotocol/sdk/dist/esm", p)).href);
  const { Client } = await at("client/index.js");
  const { StreamableHTTPClientTransport } = await at("client/streamableHttp.js");
  return { Client, StreamableHTTPClientTransport };
}

const sdk = await loadSdk(args.sdk);
const auth = { Authorization: `Bearer ${args.token}` };

const run = promisify(execFile);
async function send(channel, text) {
  await run(args.bin, ["--home", args.home, "send", "--channel", channel, text]);
}

async function connect(name, { headers = auth, lib = sdk, onerror } = {}) {
  const transport = new lib.StreamableHTTPClientTransport(new URL(args.url), { requestInit: { headers } });
  const client = new lib.Client({ name, version: "1.0.0" });
  if (onerror) {
    transport.onerror = onerror;
    client.onerror = onerror;
  }
  await client.connect(transport);
  return { client, transport };
}

async function call(client, name, a = {}) {
  const r = await client.callTool({ name, arguments: a }, undefined, { timeout: 120_000 });
  check(!r.isError, `${name} answered without error: ${JSON.stringify(r)}`);
  return r.structuredContent;
}

async function inFlight(client) {
  return (await call(client, "inbox_stats")).wait_calls_in_flight;
}

async function until(what, f, ms = 5000) {
  const start = Date.now();
  while (!(await f())) {
    if (Date.now() - start > ms) fail(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/// Collects items from waits until `n` arrived.
async function collect(client, n, a = { timeout_s: 5 }) {
  const items = [];
  while (items.length < n) {
    const r = await call(client, "wait_for_inbound_message", a);
    if (r.items.length === 0) break;
    items.push(...r.items);
  }
  return items;
}

// 1. Tools, with input and output schemas: every schema compiles in Ajv (the validator the SDK
// uses, strict mode), every tool is called with arguments its input schema accepts, and every
// result (a refusal too) validates against its output schema, here and in the SDK.
{
  const { client } = await connect("ts-probe");
  const { tools } = await client.listTools();
  check(tools.length === 12, `12 tools, got ${tools.length}`);
  check(tools.every((t) => t.outputSchema?.type === "object"), "every tool declares an output schema");
  check(!JSON.stringify(tools).includes('"format"'), "no non-standard format in the schemas");
  const { default: Ajv } = await import(pathToFileURL(join(args.sdk, "ajv/dist/ajv.js")).href);
  const ajv = new Ajv({ strict: true, allErrors: true });
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  const compiled = {};
  for (const t of tools) {
    try {
      compiled[t.name] = { input: ajv.compile(t.inputSchema), output: ajv.compile(t.outputSchema) };
    } catch (e) {
      fail(`${t.name}: a schema does not compile in strict Ajv: ${e}`);
    }
  }
  await send("alerts/schema", "a message to run");
  const samples = [
    ["wait_for_inbound_message", { timeout_s: 0.2, max_items: 5 }],
    ["inbox_pull", { limit: 5, mark_read: false }],
    ["channel_list", { channel: "alerts/*", limit: 5 }],
    ["channel_ack", {}],
    ["channel_confirm", { id: 999999, decision: "no" }],
    ["channel_run", { seq: 1 }],
    ["channel_reply", { seq: 1, text: "on it" }],
    ["channel_pause", {}],
    ["channel_resume", {}],
    ["rules_list", {}],
    ["rules_reload", {}],
    ["inbox_stats", {}],
  ];
  check(samples.length === tools.length && samples.every(([n]) => byName[n]), "a sample for every tool");
  for (const [name, a] of samples) {
    const { input, output } = compiled[name];
    check(input(a), `${name}: its input schema accepts ${JSON.stringify(a)}: ${ajv.errorsText(input.errors)}`);
    const r = await client.callTool({ name, arguments: a }, undefined, { timeout: 60_000 });
    check(r.structuredContent && typeof r.structuredContent === "object", `${name}: structured content`);
    check(output(r.structuredContent), `${name}: its output schema accepts the result: ${ajv.errorsText(output.errors)}`);
    check(JSON.stringify(JSON.parse(r.content[0].text)) === JSON.stringify(r.structuredContent), `${name}: the text repeats it`);
  }
  // What the schemas refuse.
  check(!compiled.channel_confirm.input({ id: 1 }), "channel_confirm's schema requires `decision`");
  check(!compiled.channel_confirm.input({ id: 1, decision: "maybe" }), "decision is yes or no");
  check(!compiled.wait_for_inbound_message.input({ timeout_s: "soon" }), "timeout_s is a number");
  await client.close();
  ok("every tool's input and output schema compiles in strict Ajv and holds for a real call");
}

// 2. Two windows of the same host each get every nudge once.
{
  const a = await connect("copilot-cli");
  const b = await connect("copilot-cli");
  await send("alerts/ts", "nudge one");
  await send("alerts/ts", "nudge two");
  const got = async (c) => (await collect(c.client, 2)).filter((i) => i.kind === "nudge").map((i) => i.message.content);
  const [ga, gb] = await Promise.all([got(a), got(b)]);
  check(JSON.stringify(ga) === JSON.stringify(["nudge one", "nudge two"]), `first session: ${ga}`);
  check(JSON.stringify(gb) === JSON.stringify(["nudge one", "nudge two"]), `second session: ${gb}`);
  const again = await call(a.client, "wait_for_inbound_message", { timeout_s: 0.2 });
  check(again.items.length === 0, "each nudge once per session");
  await a.client.close();
  await b.client.close();
  ok("two sessions named alike each got every nudge once");
}

// 3. Contended auto items: each reaches exactly one session.
{
  const N = 60;
  const workers = await Promise.all([0, 1, 2].map(() => connect("worker")));
  const seen = [];
  const loops = workers.map(async ({ client }) => {
    const mine = [];
    for (;;) {
      const r = await call(client, "wait_for_inbound_message", { timeout_s: 2, max_items: 3 });
      const work = r.items.filter((i) => i.kind === "auto");
      if (r.items.length === 0) return mine;
      mine.push(...work.map((i) => i.action_id));
    }
  });
  for (let i = 0; i < N; i++) await send("work/ts", `job ${i}`);
  for (const mine of await Promise.all(loops)) seen.push(...mine);
  check(seen.length === N, `${N} auto items taken, got ${seen.length}`);
  check(new Set(seen).size === N, "no auto item twice");
  for (const { client } of workers) await client.close();
  ok(`${N} contended auto items each reached exactly one of 3 sessions`);
}

// 4. A session deleted mid-wait loses nothing: the next auto item reaches a live session.
{
  const watcher = await connect("watcher");
  const gone = await connect("copilot-cli");
  const pending = call(gone.client, "wait_for_inbound_message", { timeout_s: 30 }).then(
    (r) => ({ items: r.items }),
    (e) => ({ error: String(e) }),
  );
  await until("the wait is in flight", async () => (await inFlight(watcher.client)) >= 1);
  const start = Date.now();
  await gone.transport.terminateSession();
  // The server ends the wait at once (it takes nothing); whether the SDK settles a call whose
  // session it deleted is the SDK's business, so only a settled answer is checked.
  await until("the deleted wait stops", async () => (await inFlight(watcher.client)) === 0, 2000);
  const stopped = Date.now() - start;
  const settled = await Promise.race([pending, new Promise((r) => setTimeout(() => r(null), 500))]);
  check(!settled?.items || settled.items.length === 0, `a deleted wait takes nothing: ${JSON.stringify(settled)}`);
  await gone.client.close();
  const live = await connect("copilot-cli");
  const next = call(live.client, "wait_for_inbound_message", { timeout_s: 20 });
  await until("the live wait is in flight", async () => (await inFlight(watcher.client)) >= 1);
  await send("work/ts", "after delete");
  const r = await next;
  check(r.items.length === 1 && r.items[0].kind === "auto", `the live session got it: ${JSON.stringify(r)}`);
  check(r.items[0].message.content === "after delete", "the right item");
  await live.client.close();
  await watcher.client.close();
  ok(`DELETE ended the wait in ${stopped} ms; the next auto item reached a live session`);
}

// 5. Without the token, 401; from a foreign origin, 403.
{
  let refused = null;
  try {
    await connect("no-token", { headers: {} });
  } catch (e) {
    refused = `${e?.code} ${String(e)}`;
  }
  check(refused && refused.includes("401"), `no token is refused with 401: ${refused}`);
  refused = null;
  try {
    await connect("evil", { headers: { ...auth, Origin: "http://evil.example" } });
  } catch (e) {
    refused = `${e?.code} ${String(e)}`;
  }
  check(refused && refused.includes("403"), `a foreign Origin is refused with 403: ${refused}`);
  ok("401 without the token, 403 from a foreign origin");
}

// 6. An older SDK (negotiates 2025-06-18 or earlier) sees no SSE parse errors.
if (args["old-sdk"]) {
  const old = await loadSdk(args["old-sdk"]);
  const errors = [];
  const origError = console.error;
  console.error = (...a) => errors.push(a.map(String).join(" "));
  const { client } = await connect("old-sdk", { lib: old, onerror: (e) => errors.push(String(e)) });
  await client.listTools();
  const empty = await client.callTool({ name: "wait_for_inbound_message", arguments: { timeout_s: 0.5 } });
  await send("alerts/old", "for the old sdk");
  let items = [];
  for (let i = 0; i < 10 && items.length === 0; i++) {
    const r = await client.callTool({ name: "wait_for_inbound_message", arguments: { timeout_s: 2 } });
    items = r.structuredContent?.items ?? JSON.parse(r.content[0].text).items;
  }
  await client.close();
  console.error = origError;
  check(!empty.isError, "the old SDK's wait works");
  check(items.length >= 1, "the old SDK got the nudge");
  check(errors.length === 0, `the old SDK logged errors: ${JSON.stringify(errors)}`);
  ok("an older SDK talks to /mcp without SSE errors");
}

process.exit(0);
