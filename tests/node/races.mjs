// The races of delivery, driven by the official TypeScript SDK as a real client would drive
// them, against a running `switchboard serve --no-stdio --http` (started by
// tests/integration/races.rs):
//
//   node tests/node/races.mjs --sdk DIR/node_modules --url http://127.0.0.1:PORT/mcp \
//        --ingest 127.0.0.1:PORT --token TOKEN --home HOME --bin target/debug/switchboard \
//        --race disconnect|cancel|fair --transport stdio|http --n 200
//
// - disconnect: N times, a fresh session waits; one auto item is sent (the waking POST), and
//   0–5 ms after the POST returned the client closes (over stdio: stdin closed, the SDK's own
//   close; over HTTP: every request of the transport aborted, no DELETE).
// - cancel: one session waits N times; the wait is aborted (`notifications/cancelled`) 0–8 ms
//   after the waking POST began, so on either side of its answer.
// - fair: four sessions wait in loops while N auto items are sent one by one.
//
// Then a collector session takes what is left until every item was received once. The last
// line of stdout is the tally as JSON: items sent, received, lost, duplicates (an item
// received twice) and how many of those were not marked `redelivered`, and per session counts
// for `fair`. Exit 0 once the tally is printed; the Rust test asserts on it.

import { join } from "node:path";
import { pathToFileURL } from "node:url";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].slice(2)] = process.argv[i + 1];
const N = Number(args.n ?? 200);

const at = (p) => import(pathToFileURL(join(args.sdk, "@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await at("client/index.js");
const { StreamableHTTPClientTransport } = await at("client/streamableHttp.js");
const { StdioClientTransport } = await at("client/stdio.js");

const auth = { Authorization: `Bearer ${args.token}` };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/// A session over `transport` (stdio: a `serve` front end on the same home).
async function connect(name, transport = args.transport) {
  const t =
    transport === "stdio"
      ? new StdioClientTransport({
          command: args.bin,
          args: ["--home", args.home, "serve", "--no-listen"],
          env: { ...process.env, RUST_LOG: "warn" },
          stderr: "ignore",
        })
      : new StreamableHTTPClientTransport(new URL(args.url), { requestInit: { headers: auth } });
  const client = new Client({ name, version: "1.0.0" });
  client.onerror = () => {};
  await client.connect(t);
  return client;
}

const WAIT = "wait_for_inbound_message";

function wait(client, a, options = {}) {
  return client
    .callTool({ name: WAIT, arguments: a }, undefined, { timeout: 120_000, ...options })
    .then((r) => {
      if (r.isError) throw new Error(`the wait failed: ${JSON.stringify(r)}`);
      return r.structuredContent.items.filter((i) => i.kind === "auto");
    });
}

/// `POST /v1/messages`: one message whose auto item the race is about.
async function ingest(i) {
  const r = await fetch(`http://${args.ingest}/v1/messages`, {
    method: "POST",
    headers: { ...auth, "Content-Type": "application/json" },
    body: JSON.stringify({ server: "race", channel: "work/race", content: `item ${i}` }),
  });
  if (r.status !== 202) throw new Error(`ingest answered ${r.status}: ${await r.text()}`);
  await r.body?.cancel();
}

// Every receipt: (action id, redelivered, by whom).
const received = [];
// How the races went: waits aborted, victims that had their item before they left.
const races = { aborted: 0, answered_first: 0 };
const take = (items, who) => {
  for (const i of items) received.push({ id: i.action_id, redelivered: i.redelivered === true, who });
};

const monitor = await connect("race-monitor", "http");
async function inFlight() {
  const r = await monitor.callTool({ name: "inbox_stats", arguments: {} });
  return r.structuredContent.wait_calls_in_flight;
}
async function until(what, f, ms = 10_000) {
  const start = Date.now();
  while (!(await f())) {
    if (Date.now() - start > ms) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(2);
  }
}

/// Starts waits on `client` until one is in flight with nothing to take (work given back by
/// an earlier round is taken and counted on the way); that wait's outcome.
async function waitInFlight(client, who) {
  for (;;) {
    // Each wait its own abort: a signal aborted later would cancel every request it was given.
    const state = { outcome: "pending", abort: new AbortController() };
    state.done = wait(client, { timeout_s: 30 }, { signal: state.abort.signal }).then(
      (items) => {
        take(items, who);
        state.outcome = "answered";
      },
      () => {
        state.outcome = "failed";
      },
    );
    await until("a wait is in flight", async () => state.outcome !== "pending" || (await inFlight()) >= 1);
    if (state.outcome === "pending") return state;
    await state.done;
  }
}

async function disconnect() {
  for (let i = 0; i < N; i++) {
    const who = `victim-${i}`;
    const victim = await connect(who);
    const waiting = await waitInFlight(victim, who);
    await ingest(i);
    await sleep(Math.random() * 5);
    if (waiting.outcome === "answered") races.answered_first++;
    await victim.close();
    await waiting.done;
  }
}

async function cancel() {
  const client = await connect("canceller");
  for (let i = 0; i < N; i++) {
    const waiting = await waitInFlight(client, "canceller");
    const posted = ingest(i);
    // A careful client: no abort once the answer is in.
    const timer = setTimeout(() => {
      if (waiting.outcome === "pending") {
        races.aborted++;
        waiting.abort.abort("the race's cancel");
      }
    }, Math.random() * 8);
    await posted;
    await waiting.done;
    clearTimeout(timer);
  }
  await client.close();
}

async function fair() {
  const sessions = await Promise.all([0, 1, 2, 3].map((n) => connect(`fair-${n}`)));
  let stop = false;
  const loops = sessions.map(async (client, n) => {
    let got = 0;
    while (!stop) {
      const items = await wait(client, { timeout_s: 2 });
      take(items, `fair-${n}`);
      got += items.length;
    }
    return got;
  });
  await until("all four wait", async () => (await inFlight()) >= 4);
  for (let i = 0; i < N; i++) await ingest(i);
  await until("every item was taken", async () => new Set(received.map((r) => r.id)).size >= N, 30_000);
  stop = true;
  const per = await Promise.all(loops);
  for (const c of sessions) await c.close();
  return per;
}

let per;
if (args.race === "disconnect") await disconnect();
else if (args.race === "cancel") await cancel();
else if (args.race === "fair") per = await fair();
else throw new Error(`unknown race ${args.race}`);

// The collector takes what is left: work given back, marked or not, reaches it.
const collector = await connect("race-collector", "http");
const deadline = Date.now() + 60_000;
while (new Set(received.map((r) => r.id)).size < N && Date.now() < deadline) {
  take(await wait(collector, { timeout_s: 1, max_items: 100 }), "collector");
}
// Anything still handed out twice shows up now too.
take(await wait(collector, { timeout_s: 0.5, max_items: 100 }), "collector");
await collector.close();
await monitor.close();

const seen = new Map();
let duplicates = 0;
let unmarked = 0;
for (const r of received) {
  if (seen.has(r.id)) {
    duplicates++;
    if (!r.redelivered) unmarked++;
  }
  seen.set(r.id, (seen.get(r.id) ?? 0) + 1);
}
for (const [id, count] of seen) {
  if (count > 1) {
    const trail = received.filter((r) => r.id === id).map((r) => `${r.who}${r.redelivered ? "*" : ""}`);
    console.error(`item ${id} received ${count} times: ${trail.join(", ")}`);
  }
}
const tally = {
  race: args.race,
  transport: args.transport,
  sent: N,
  received: seen.size,
  lost: N - seen.size,
  duplicates,
  unmarked_duplicates: unmarked,
  marked: received.filter((r) => r.redelivered).length,
  by_collector: received.filter((r) => r.who === "collector").length,
  per_session: per,
  ...races,
};
console.log(JSON.stringify(tally));
process.exit(0);
