#!/usr/bin/env bash
# HTTP ingest load: messages/s accepted by POST /v1/messages on loopback, with wrk, at
# fsync=always (group commit) and fsync=never, beside this machine's single-file fsync rate
# measured in the same run. Prints a Markdown table of medians.
#
#   benches/ingest_load.sh            # RUNS=3 DURATION=10s CONNECTIONS="1 32" THREADS=2
#
# Needs wrk (apt-get install wrk) and python3. Builds the release binary first (honours
# CARGO_TARGET_DIR); BIN=path measures that binary instead (to compare two builds, run the
# script once with each, alternating, with RUNS=1). Each run starts a fresh
# `switchboard serve --no-stdio` on a temporary home (rate limit off, one rule that matches
# nothing, so the dispatcher evaluates every message but no action queue fills), runs wrk
# against it, and stops it. Runs of the two policies are interleaved so that noise from other
# work on the machine falls on both alike.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-"1 32"}
THREADS=${THREADS:-2}
FSYNC_SECONDS=${FSYNC_SECONDS:-3}

command -v wrk >/dev/null || { echo "error: wrk is not installed (apt-get install wrk)" >&2; exit 2; }
. benches/release_bin.sh

work=$(mktemp -d)
server_pid=
cleanup() {
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# 119 bytes: the size of a small alert or CI event.
body='{"server":"bench","channel":"load/test","content":"wrk load: a message the size of a small alert","metadata":{"n":"1"}}'

# Single-file fsync rate: 120-byte appends, each followed by fdatasync, for FSYNC_SECONDS.
fsync_rate() {
    python3 - "$work/fsync-probe" "$FSYNC_SECONDS" <<'EOF'
import os, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
line = b"x" * 119 + b"\n"
n, start = 0, time.monotonic()
while time.monotonic() - start < seconds:
    os.write(fd, line)
    os.fdatasync(fd)
    n += 1
elapsed = time.monotonic() - start
os.close(fd)
os.unlink(path)
print(f"{n / elapsed:.0f}")
EOF
}

start_server() { # policy → sets server_pid, addr, token
    local policy=$1 home="$work/home-$1-$RANDOM"
    mkdir -p "$home"
    printf '{"inbox": {"fsync": "%s"}, "http": {"rateLimit": "0"}}\n' "$policy" >"$home/switchboard.json"
    printf '{"rules": [{"name": "bench-none", "channel": "never/matches"}]}\n' >"$home/triggers.json"
    RUST_LOG=warn "$bin" --home "$home" serve --no-stdio --listen 127.0.0.1:0 \
        </dev/null >/dev/null 2>>"$work/server.log" &
    server_pid=$!
    for _ in $(seq 200); do
        [[ -s $home/endpoint.json ]] && break
        sleep 0.05
    done
    addr=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ingest"])' "$home/endpoint.json")
    token=$(cat "$home/token")
}

stop_server() {
    kill "$server_pid"
    wait "$server_pid" || true
    server_pid=
}

# wrk's Lua: every request is the same POST.
cat >"$work/post.lua" <<EOF
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
EOF

# to_ms "1.23ms" → 1.23 (wrk prints us, ms or s)
to_ms() {
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
        else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
        else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
        else { printf "%s", v } }'
}

median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

results="$work/results"
: >"$results"
fsyncs="$work/fsyncs"
: >"$fsyncs"
echo "machine: $(nproc) cores, $(uname -sr), temp dir on $(df -T "$work" | awk 'NR == 2 { print $2 }')" >&2
for run in $(seq "$RUNS"); do
    rate=$(fsync_rate)
    echo "$rate" >>"$fsyncs"
    echo "run $run: single-file fsync rate ${rate}/s" >&2
    for policy in always never; do
        for c in $CONNECTIONS; do
            start_server "$policy"
            out=$(wrk -t "$(( c < THREADS ? c : THREADS ))" -c "$c" -d "$DURATION" --latency \
                -H "Authorization: Bearer $token" -s "$work/post.lua" "http://$addr/v1/messages")
            stop_server
            if grep -q "Non-2xx" <<<"$out"; then
                echo "error: refused requests during the run:" >&2
                echo "$out" >&2
                exit 1
            fi
            rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
            p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' <<<"$out")")
            p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' <<<"$out")")
            echo "$policy $c $rps $p50 $p99" >>"$results"
            echo "run $run: fsync=$policy c=$c: ${rps} req/s, p50 ${p50} ms, p99 ${p99} ms" >&2
        done
    done
done

echo
echo "Medians of $RUNS runs of $DURATION each; wrk -t$THREADS, one 119-byte message per request."
echo
echo "| fsync | connections | messages/s | p50 ms | p99 ms |"
echo "| --- | ---: | ---: | ---: | ---: |"
for policy in always never; do
    for c in $CONNECTIONS; do
        sel() { awk -v p="$policy" -v c="$c" -v f="$1" '$1 == p && $2 == c { print $f }' "$results" | median; }
        printf '| %s | %s | %.0f | %s | %s |\n' "$policy" "$c" "$(sel 3)" "$(sel 4)" "$(sel 5)"
    done
done
echo
echo "Single-file fsync rate (120-byte append + fdatasync, ${FSYNC_SECONDS}s, median): $(median <"$fsyncs")/s"
