#!/usr/bin/env bash
# Wake-up latency through the real binary: a message POSTed to /v1/messages → the pending
# `wait_for_inbound_message` of one MCP session over streamable HTTP returns it, at
# fsync=always (the default; FSYNC sets it), first with no other traffic (the same-run
# baseline), then under RATE messages/s of other traffic that no rule matches. Prints a
# Markdown table.
#
#   benches/wake_latency.sh        # SAMPLES=400 RATE=300 GAP_MS=40 FSYNC=always; BIN=path skips the build
#
# One server on a temporary home: `{"http": {"rateLimit": "0"}}`, fsync from FSYNC, one notify
# rule on channel `wake/probe`. The probe (python3, standard library only) opens one MCP
# session (initialize, initialized), then for each sample: calls `wait_for_inbound_message` on
# a thread, lets GAP_MS pass so the wait is pending in the server, reads the clock, POSTs one
# ~120-byte message on `wake/probe` over a keep-alive connection, and reads the clock again
# when the wait's result holding that message has been read from the response stream. `post`
# is the POST's own round trip (its 202 means the message is fsynced); `wake` is send → wait
# result in hand. The other traffic is a separate python3 process POSTing ~120-byte messages
# on `wake/other` at RATE/s over keep-alive connections, paced by the clock, started before
# the loaded phase and stopped after it. Both run on the same cores as the server, and the
# python client's own time is inside every figure; `benches/wake_latency.rs` measures the same
# with Rust clients.
set -euo pipefail
cd "$(dirname "$0")/.."

SAMPLES=${SAMPLES:-400}
RATE=${RATE:-300}
GAP_MS=${GAP_MS:-40}
FSYNC=${FSYNC:-always}

. benches/release_bin.sh

work=$(mktemp -d)
home="$work/home"
mkdir -p "$home"
server_pid=
load_pid=
cleanup() {
    if [[ -n $load_pid ]]; then kill "$load_pid" 2>/dev/null || true; fi
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

printf '{"http": {"rateLimit": "0"}, "inbox": {"fsync": "%s"}}\n' "$FSYNC" >"$home/switchboard.json"
printf '{"rules": [{"name": "wake-probe", "channel": "wake/probe"}]}\n' >"$home/triggers.json"
RUST_LOG=warn "$bin" --home "$home" serve --no-stdio --listen 127.0.0.1:0 --http 127.0.0.1:0 \
    </dev/null >/dev/null 2>>"$work/server.log" &
server_pid=$!
for _ in $(seq 200); do
    [[ -s $home/endpoint.json ]] && break
    sleep 0.05
done
[[ -s $home/endpoint.json ]] || { echo "error: switchboard did not start" >&2; cat "$work/server.log" >&2; exit 1; }
ingest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ingest"])' "$home/endpoint.json")
mcp=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["mcp"])' "$home/endpoint.json")
token=$(cat "$home/token")

# Other traffic at RATE/s until killed; prints "sent N refused M" on SIGTERM.
cat >"$work/load.py" <<'EOF'
import http.client, json, signal, sys, time
addr, token, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
host, port = addr.rsplit(":", 1)
headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
n, refused, running = 0, 0, True
def stop(*_):
    global running
    running = False
signal.signal(signal.SIGTERM, stop)
conn = http.client.HTTPConnection(host, int(port), timeout=30)
start = time.monotonic()
while running:
    due = start + n / rate
    now = time.monotonic()
    if due > now:
        time.sleep(due - now)
    body = json.dumps({"server": "load", "channel": "wake/other",
                       "content": f"other traffic {n}: " + "y" * 90})
    ok = False
    for _ in range(3):
        try:
            conn.request("POST", "/v1/messages", body, headers)
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 202
            break
        except (ConnectionError, http.client.HTTPException):
            conn.close()
    refused += not ok
    n += 1
elapsed = time.monotonic() - start
print(f"sent {n} refused {refused} in {elapsed:.1f}s ({n / elapsed:.0f} msg/s)", flush=True)
EOF

# The probe: one MCP session; SAMPLES samples; prints "wake_ms post_ms" lines.
cat >"$work/probe.py" <<'EOF'
import http.client, json, sys, threading, time
from mcp_http import Session
mcp_url, ingest, token, samples, gap = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]) / 1000
mcp = Session(mcp_url, token, "wake-probe")
wait_call = mcp.wait
while wait_call():  # drain whatever is queued already
    pass
host, port = ingest.rsplit(":", 1)
post_conn = http.client.HTTPConnection(host, int(port), timeout=30)
post_headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
def post(body):
    global post_conn
    for _ in range(3):
        try:
            post_conn.request("POST", "/v1/messages", body, post_headers)
            resp = post_conn.getresponse()
            resp.read()
            return resp.status
        except (ConnectionError, http.client.HTTPException):
            post_conn.close()
    return 0
missed = 0
for n in range(samples):
    marker = f"wake-{n}-{time.time_ns()}"
    got = {}
    def waiter():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            items = wait_call()
            t = time.perf_counter()
            if any(marker in json.dumps(i) for i in items):
                got["t"] = t
                return
    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(gap)
    body = json.dumps({"server": "probe", "channel": "wake/probe",
                       "content": f"probe {marker}: " + "z" * 80})
    t0 = time.perf_counter()
    status = post(body)
    t_ack = time.perf_counter()
    th.join()
    if status != 202 or "t" not in got:
        missed += 1
        continue
    print(f"{(got['t'] - t0) * 1e3:.3f} {(t_ack - t0) * 1e3:.3f}", flush=True)
print(f"missed {missed}", file=sys.stderr)
EOF

# stats FILE COLUMN → "p50 p90 p99 max n" (nearest-rank percentiles)
stats() {
    awk -v c="$2" '{ print $c }' "$1" | sort -g | awk '{ a[NR] = $1 }
        END { n = NR
              i50 = int(n * 0.50); if (i50 < n * 0.50) i50++
              i90 = int(n * 0.90); if (i90 < n * 0.90) i90++
              i99 = int(n * 0.99); if (i99 < n * 0.99) i99++
              printf "%.2f %.2f %.2f %.2f %d", a[i50], a[i90], a[i99], a[n], n }'
}

echo "machine: $(nproc) cores, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg); $SAMPLES samples a phase, ${GAP_MS} ms apart" >&2
PYTHONPATH=benches python3 "$work/probe.py" "$mcp" "$ingest" "$token" "$SAMPLES" "$GAP_MS" >"$work/quiet" 2>"$work/quiet.err"
echo "quiet phase done ($(cat "$work/quiet.err"))" >&2

python3 "$work/load.py" "$ingest" "$token" "$RATE" >"$work/load.out" &
load_pid=$!
sleep 2
PYTHONPATH=benches python3 "$work/probe.py" "$mcp" "$ingest" "$token" "$SAMPLES" "$GAP_MS" >"$work/loaded" 2>"$work/loaded.err"
kill -TERM "$load_pid"
wait "$load_pid" || true
load_pid=
echo "loaded phase done ($(cat "$work/loaded.err")); other traffic: $(cat "$work/load.out")" >&2
kill -0 "$server_pid" 2>/dev/null || { echo "error: switchboard died" >&2; tail -20 "$work/server.log" >&2; exit 1; }

echo
echo "fsync=$FSYNC, one MCP session over streamable HTTP; ms; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| phase | measure | p50 | p90 | p99 | max | samples |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
for phase in quiet loaded; do
    if [[ $phase == quiet ]]; then
        label="no other traffic (baseline)"
    else
        label="$(sed -n 's/.*(\([0-9]*\) msg\/s).*/\1/p' "$work/load.out") msg/s other traffic"
    fi
    read -r p50 p90 p99 max n <<<"$(stats "$work/$phase" 1)"
    echo "| $label | POST → wait returns | $p50 | $p90 | $p99 | $max | $n |"
    read -r p50 p90 p99 max n <<<"$(stats "$work/$phase" 2)"
    echo "| $label | POST → 202 (baseline) | $p50 | $p90 | $p99 | $max | $n |"
done
if grep -q "refused [1-9]" "$work/load.out"; then
    echo "error: the other traffic saw refusals" >&2
    exit 1
fi
