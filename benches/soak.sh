#!/usr/bin/env bash
# Soak: mixed load on the release binary for DURATION seconds while RSS (all, and anonymous) and open file
# descriptors are sampled every SAMPLE seconds, with the server's CPU time. Prints the samples
# and a summary: RSS, fds, CPU, and the ingest POST latency the sender saw.
#
#   benches/soak.sh                 # DURATION=600 RATE=300 SESSIONS=4 CHURN=2 RELOAD=10 SAMPLE=10 SENDERS=4
#
# The load, all at once:
# - ingest: POST /v1/messages at RATE messages/s in all, from SENDERS processes (one keep-alive
#   connection each, paced by the clock; one process alone cannot hold 300/s when every POST
#   waits for an fsync on a loaded machine) (one in ten on
#   `soak/alert`, which a notify rule turns into a nudge, one in fifty with a repeated id);
# - SESSIONS MCP sessions over streamable HTTP, each calling `wait_for_inbound_message`
#   (timeout 20 s) in a loop, so nudges are delivered and long-polls come and go;
# - CHURN processes that each, in a loop, open an MCP session over HTTP (initialize), call one
#   wait (timeout 1 s) and leave without a DELETE, as a host that crashes does: abandoned
#   sessions must expire (`mcp.sessionIdleTimeout`) and be bounded (`mcp.maxSessions`);
# - a rules reload every RELOAD seconds, alternating `switchboard rules reload` and a save of
#   triggers.json (which the watcher reloads);
# - every 30 s, a slow client that opens a connection, sends half a header and goes quiet.
# At the end every seq a 202 acknowledged is looked up in the journal (rotation is set past the
# run's size, so the journal holds them all): "acknowledged and missing" must be 0.
# Needs python3 (standard library only) and curl. BIN=path skips the build. Builds the release binary first (honours
# CARGO_TARGET_DIR). Exits 1 if the server dies, the ingest loop sees a non-202, or an
# acknowledged message is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-600}
RATE=${RATE:-300}
SESSIONS=${SESSIONS:-4}
CHURN=${CHURN:-2}
RELOAD=${RELOAD:-10}
SAMPLE=${SAMPLE:-10}
SENDERS=${SENDERS:-4}

. benches/release_bin.sh

work=$(mktemp -d)
home="$work/home"
mkdir -p "$home"
server_pid=
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

rules() { # $1 = a word that makes each save different
    printf '{"rules": [{"name": "soak-nudge", "channel": "soak/alert", "description": "%s"}]}\n' "$1"
}
printf '{"http": {"rateLimit": "0"}, "inbox": {"rotateBytes": 4294967296}}\n' >"$home/switchboard.json"
rules start >"$home/triggers.json"
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

# Ingest at RATE/s; prints "sent N refused M" when done.
cat >"$work/ingest.py" <<'EOF'
import http.client, json, sys, time
addr, token, rate, duration, who = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
host, port = addr.rsplit(":", 1)
conn = http.client.HTTPConnection(host, int(port), timeout=30)
headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
start, n, refused, lat, acked = time.monotonic(), 0, 0, [], []
while time.monotonic() - start < duration:
    due = start + n / rate
    now = time.monotonic()
    if due > now:
        time.sleep(due - now)
    channel = "soak/alert" if n % 10 == 0 else "soak/info"
    msg = {"server": "soak", "channel": channel, "content": f"soak message {n}: " + "x" * 80}
    if n % 50 == 0:
        msg["id"] = f"repeat-{who}-{n // 500}"
    resp = None
    t0 = time.perf_counter()
    for attempt in range(3):
        try:
            conn.request("POST", "/v1/messages", json.dumps(msg), headers)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status == 202:
                for a in json.loads(body)["accepted"]:
                    acked.append(a["seq"])
            break
        except (ConnectionError, http.client.HTTPException):
            conn.close()  # closed by the server's idle timeout: reconnect
    lat.append(time.perf_counter() - t0)
    if resp is None or resp.status != 202:
        refused += 1
    n += 1
elapsed = time.monotonic() - start
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3
with open(sys.argv[6], "w") as f:
    f.write("\n".join(map(str, acked)))
print(f"sender {who}: sent {n} refused {refused} in {elapsed:.0f}s ({n / elapsed:.0f} msg/s); "
      f"POST -> 202 p50 {q(0.5):.2f} ms, p99 {q(0.99):.2f} ms, max {lat[-1] * 1e3:.1f} ms")
EOF

# One MCP session over streamable HTTP, waiting in a loop; prints "waits N items M".
cat >"$work/session.py" <<'EOF'
import sys, time
from mcp_http import Session
url, token, duration, name = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
mcp = Session(url, token, name)
start, waits, items = time.monotonic(), 0, 0
while time.monotonic() - start < duration:
    items += len(mcp.wait())
    waits += 1
print(f"{name}: waits {waits} items {items}")
EOF

# Sessions that come and go without a DELETE; prints "churn N: sessions S".
cat >"$work/churn.py" <<'EOF'
import sys, time
from mcp_http import Session
url, token, duration, who = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
start, opened = time.monotonic(), 0
while time.monotonic() - start < duration:
    mcp = Session(url, token, f"churn-{who}-{opened}")
    mcp.wait(timeout_s=1)
    opened += 1  # and left without a DELETE
print(f"churn {who}: sessions {opened}")
EOF

rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$server_pid/status"; }
# The heap and stacks alone: VmRSS also counts the binary's code pages, which grow by megabytes
# the first time a path runs (the first sessions to expire, the first reload) and are not memory
# the server holds.
anon_kib() { awk '/^RssAnon/ { print $2 }' "/proc/$server_pid/status"; }
# utime + stime of the server, in clock ticks (fields 14 and 15 of stat; the name has no spaces)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server_pid/stat"; }
hz=$(getconf CLK_TCK)
fds() { ls "/proc/$server_pid/fd" | wc -l; }

for s in $(seq "$SENDERS"); do
    python3 "$work/ingest.py" "$ingest" "$token" "$(awk -v r="$RATE" -v n="$SENDERS" 'BEGIN { print r / n }')" "$DURATION" "$s" "$work/acked-$s" >"$work/ingest-$s.out" &
    pids+=($!)
done
for s in $(seq "$SESSIONS"); do
    PYTHONPATH=benches python3 "$work/session.py" "$mcp" "$token" "$DURATION" "soak-$s" >"$work/session-$s.out" &
    pids+=($!)
done
for s in $(seq "$CHURN"); do
    PYTHONPATH=benches python3 "$work/churn.py" "$mcp" "$token" "$DURATION" "$s" >"$work/churn-$s.out" &
    pids+=($!)
done

echo "machine: $(nproc) cores, $(uname -sr); ${DURATION}s at ${RATE} msg/s, $SESSIONS sessions, $CHURN churning, reload every ${RELOAD}s" >&2
echo "| t (s) | RSS (MiB) | anonymous RSS (MiB) | fds | last seq | server CPU since last sample (% of one core) |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
ticks0=$(cpu_ticks)
last_ticks=$ticks0
last_t=0
samples="$work/samples"
: >"$samples"
start=$(date +%s)
next_reload=$RELOAD
next_slow=30
reloads=0
while :; do
    t=$(( $(date +%s) - start ))
    kill -0 "$server_pid" 2>/dev/null || { echo "error: switchboard died at ${t}s" >&2; tail -20 "$work/server.log" >&2; exit 1; }
    if (( t >= next_reload )); then
        if (( reloads % 2 == 0 )); then
            "$bin" --home "$home" rules reload >/dev/null
        else
            rules "save-$reloads" >"$home/triggers.json.tmp" && mv "$home/triggers.json.tmp" "$home/triggers.json"
        fi
        reloads=$(( reloads + 1 ))
        next_reload=$(( next_reload + RELOAD ))
    fi
    if (( t >= next_slow )); then
        python3 - "$ingest" <<'EOF' &
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n")
s.settimeout(60)
try:
    s.recv(1)
except OSError:
    pass
EOF
        next_slow=$(( next_slow + 30 ))
    fi
    if (( t % SAMPLE == 0 )) && ! grep -q "^$t " "$samples"; then
        seq=$(curl -s -H "Authorization: Bearer $token" "http://$ingest/metrics" | awk '$1 == "switchboard_last_seq" { print $2 }')
        rss=$(rss_kib)
        anon=$(anon_kib)
        f=$(fds)
        ticks=$(cpu_ticks)
        cpu=$(awk -v d=$(( ticks - last_ticks )) -v s=$(( t - last_t )) -v hz="$hz" 'BEGIN { printf "%.1f", (s > 0 ? 100 * d / hz / s : 0) }')
        last_ticks=$ticks
        last_t=$t
        echo "$t $rss $f $seq $cpu $anon" >>"$samples"
        printf '| %s | %.1f | %.1f | %s | %s | %s |\n' "$t" "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" "$(awk -v k="$anon" 'BEGIN { print k / 1024 }')" "$f" "$seq" "$cpu"
    fi
    (( t >= DURATION )) && break
    sleep 0.5
done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
reload_line=$(curl -s -H "Authorization: Bearer $token" "http://$ingest/metrics" | grep '^switchboard_rule_reloads_total' | tr '\n' ' ')

echo
cat "$work"/ingest-*.out
awk '{ for (i = 1; i < NF; i++) if ($i == "sent") n += $(i + 1) } END { printf "ingest: %d messages in %ds, %.0f msg/s\n", n, d, n / d }' d="$DURATION" "$work"/ingest-*.out
cat "$work"/session-*.out
[[ $CHURN -gt 0 ]] && cat "$work"/churn-*.out
sessions_open=$(curl -s -H "Authorization: Bearer $token" "http://$ingest/metrics" | awk '$1 == "switchboard_sessions" { print $2 }')
echo "MCP sessions open at the end: ${sessions_open:-?}"
missing=$(python3 - "$home" "$work"/acked-* <<'EOF'
import json, os, sys
home, files = sys.argv[1], sys.argv[2:]
stored = set()
for name in ("channels.jsonl.1", "channels.jsonl"):
    path = os.path.join(home, name)
    if os.path.exists(path):
        for line in open(path):
            try:
                stored.add(json.loads(line)["seq"])
            except (ValueError, KeyError):
                pass
acked = set()
for f in files:
    acked.update(int(x) for x in open(f).read().split())
print(len(acked - stored), len(acked))
EOF
)
echo "acknowledged and missing from the journal: ${missing% *} of ${missing#* }"
echo "reloads done: $reloads; $reload_line"
awk -v d=$(( $(cpu_ticks) - ticks0 )) -v s="$DURATION" -v hz="$hz" 'BEGIN { printf "server CPU over the run: %.1f s, %.1f%% of one core\n", d / hz, 100 * d / hz / s }'
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
awk 'NR == 1 { r0 = $2; f0 = $3; a0 = $6 } { if ($2 > rmax) rmax = $2; if ($3 > fmax) fmax = $3; if ($6 > amax) amax = $6; r = $2; f = $3; a = $6 }
     END { printf "RSS %.1f -> %.1f MiB (max %.1f); anonymous RSS %.1f -> %.1f MiB (max %.1f); fds %d -> %d (max %d)\n", r0 / 1024, r / 1024, rmax / 1024, a0 / 1024, a / 1024, amax / 1024, f0, f, fmax }' "$samples"
if [[ ${missing% *} != 0 ]]; then
    echo "error: acknowledged messages are missing" >&2
    exit 1
fi
if grep -q "refused [1-9]" "$work"/ingest-*.out; then
    echo "error: ingest saw refusals" >&2
    exit 1
fi
