// The approval page: renders /ui/api/state and refetches it whenever the event stream says
// something changed. Every text from the inbox is set with textContent: it is untrusted.
"use strict";

let csrf = "";
let pending = [];
let refetching = null;
let stale = false;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function timeOnly(ts) {
  return ts ? ts.replace(/^.*T/, "").replace("Z", "") : "";
}

function left(expires) {
  if (!expires) return ["no expiry", false];
  const s = Math.max(0, Math.round((Date.parse(expires) - Date.now()) / 1000));
  const m = Math.floor(s / 60);
  const text = m >= 60 ? `${Math.floor(m / 60)}h ${m % 60}m left`
    : m > 0 ? `${m}m ${s % 60}s left` : `${s}s left`;
  return [text, s < 120];
}

function excerpt(text) {
  const t = (text || "").trim();
  return t.length > 400 ? t.slice(0, 400) + "…" : t;
}

function card(p) {
  const c = el("article", "confirm");
  c.dataset.id = p.id;
  const head = el("div", "head");
  head.append(el("span", "rule", `#${p.id} ${p.rule}`),
    el("span", "meta", `${p.server}/${p.channel} · seq ${p.seq}`));
  const l = el("span", "left");
  l.dataset.expires = p.expires_at || "";
  head.append(l);
  c.append(head);
  c.append(el("div", "label", "Message (from outside: untrusted, grants no permission)"));
  c.append(el("pre", "excerpt", excerpt(p.content)));
  c.append(el("div", "label", "The agent would run"));
  c.append(el("p", "prompt", p.prompt));
  c.append(el("div", "label", "With only these tools"));
  const tools = el("div", "tools");
  for (const t of p.tools || []) tools.append(el("code", "", t));
  if (!(p.tools || []).length) tools.append(el("span", "meta", "none"));
  c.append(tools);
  const buttons = el("div", "buttons");
  const yes = el("button", "approve", "Approve");
  const no = el("button", "deny", "Deny");
  yes.type = no.type = "button";
  yes.addEventListener("click", () => answer(c, p.id, "approve"));
  no.addEventListener("click", () => answer(c, p.id, "deny"));
  buttons.append(yes, no);
  c.append(buttons);
  return c;
}

async function answer(c, id, decision) {
  for (const b of c.querySelectorAll("button")) b.disabled = true;
  const r = await fetch("/ui/api/confirm", {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
    body: JSON.stringify({ id, decision }),
  });
  if (!r.ok) {
    const body = await r.json().catch(() => ({}));
    let e = c.querySelector(".error");
    if (!e) { e = el("div", "error"); c.append(e); }
    e.textContent = body.message || `refused (${r.status})`;
    for (const b of c.querySelectorAll("button")) b.disabled = false;
  }
  refetch();
}

// Who answered, as `By`'s Display in the daemon shows it.
function who(by) {
  if (!by || typeof by !== "object") return `${by}`;
  switch (by.kind) {
    case "user": return by.name || `uid ${by.id}`;
    case "link": return by.name ? `page link "${by.name}"` : `page link ${by.id}`;
    case "slack": return by.name ? `@${by.name}` : `Slack user ${by.id}`;
    default: return by.id;
  }
}

function closedLine(x) {
  let how = x.state;
  if (x.state === "expired") how = "expired unanswered";
  else if (x.state === "resolved") how = `${x.reason || "resolved"} before anyone answered`;
  else if (x.via) how = `${x.state} via ${x.via} by ${who(x.by)}${x.reason ? ` (${x.reason})` : ""}`;
  const li = el("li");
  li.dataset.id = x.id;
  li.append(el("span", "when", timeOnly(x.at)), document.createTextNode(`#${x.id} [${x.rule}] ${how}`));
  return li;
}

function render(s) {
  csrf = s.csrf;
  pending = s.pending;
  const list = document.getElementById("pending");
  const open = new Set(pending.map((p) => String(p.id)));
  for (const c of [...list.children]) if (!open.has(c.dataset.id)) c.remove();
  const shown = new Set([...list.children].map((c) => c.dataset.id));
  for (const p of pending) if (!shown.has(String(p.id))) list.append(card(p));
  document.getElementById("pending-count").textContent = pending.length;
  document.getElementById("pending-empty").hidden = pending.length > 0;
  const closed = document.getElementById("closed");
  closed.replaceChildren(...s.closed.slice().reverse().map(closedLine));
  const messages = document.getElementById("messages");
  messages.replaceChildren(...s.messages.slice().reverse().map((m) => {
    const li = el("li");
    li.append(el("span", "when", timeOnly(m.timestamp)),
      document.createTextNode(`${m.server}/${m.channel} #${m.seq}: ${excerpt(m.content).slice(0, 160)}`));
    return li;
  }));
  tick();
}

function tick() {
  for (const l of document.querySelectorAll(".confirm .left")) {
    const [text, soon] = left(l.dataset.expires);
    l.textContent = text;
    l.classList.toggle("soon", soon);
  }
}

// One fetch of the state at a time. An event that arrives while one is in flight may
// describe a change the server made after it read that state, so it asks for one more
// fetch once the current one ends; any number of such events ask for just one.
async function refetch() {
  if (refetching) {
    stale = true;
    return refetching;
  }
  refetching = (async () => {
    try {
      do {
        stale = false;
        const r = await fetch("/ui/api/state", { cache: "no-store" });
        if (r.ok) render(await r.json());
        else {
          document.getElementById("status").textContent = "signed out: run `switchboard ui`";
          break;
        }
      } while (stale);
    } finally {
      refetching = null;
    }
  })();
  return refetching;
}

function activity(text) {
  const list = document.getElementById("activity");
  const li = el("li");
  li.append(el("span", "when", new Date().toISOString().slice(11, 19)), document.createTextNode(text));
  list.prepend(li);
  while (list.children.length > 30) list.lastChild.remove();
}

function describe(e) {
  switch (e.event) {
    case "queued": return `queued #${e.item.action_id} [${e.item.rule}] ${e.item.kind}`;
    case "answered": return `${e.state} #${e.id} [${e.rule}]${e.via ? " via " + e.via : ""} by ${who(e.by)}`;
    case "expired": return `expired #${e.id} [${e.rule}] unanswered`;
    case "resolved": return `resolved #${e.id} [${e.rule}] by message seq ${e.by_seq}`;
    case "claimed": return `claimed #${e.id} by ${e.consumer}`;
    case "delivered": return `delivered #${e.id} to ${e.consumer}`;
    case "released": return `released #${e.id} from ${e.consumer}: ${e.reason}`;
    case "dropped": return `dropped #${e.id} [${e.rule}]: ${e.reason}`;
    default: return e.event ? `${e.event} #${e.id}` : "";
  }
}

function connect() {
  const status = document.getElementById("status");
  const source = new EventSource("/ui/api/events");
  source.onopen = () => { status.textContent = "live"; status.classList.add("live"); refetch(); };
  source.onerror = () => { status.textContent = "reconnecting…"; status.classList.remove("live"); };
  source.addEventListener("action", (m) => {
    const e = JSON.parse(m.data || "{}");
    const text = describe(e);
    if (text) activity(text);
    refetch();
  });
  source.addEventListener("message", () => refetch());
}

document.addEventListener("DOMContentLoaded", () => {
  refetch();
  connect();
  setInterval(tick, 1000);
});
