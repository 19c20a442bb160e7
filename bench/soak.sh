#!/bin/bash
# bench/soak.sh - make soak: SOAK_CLIENTS clients (one keep-alive connection each) far past
# capacity for SOAK_SECONDS, against ratelimitd with the memory store and then with the Redis
# store (a redis-server of its own). Prints, per store, the answers, the errors, the p50/p99/max
# latency of an answer and the daemon's RSS before and after. Nothing here asserts a figure.
#
#   bench/soak.sh [BUILD_DIR]     (default build)
#
# Environment: SOAK_CLIENTS=64, SOAK_SECONDS=20, SOAK_KEYS=100 (users the clients spread over:
# each bucket holds 10 at 5/s, so nearly every request is denied once they are empty),
# SOAK_STORES="memory redis".
set -eu
set -o pipefail

BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$ROOT" && cd "$BUILD" && pwd)
RLD=$BUILD/ratelimitd
SOAK=$BUILD/bench/soak
CLIENTS=${SOAK_CLIENTS:-64}
SECONDS_=${SOAK_SECONDS:-20}
KEYS=${SOAK_KEYS:-100}
STORES=${SOAK_STORES:-memory redis}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlsoak.XXXXXX")
PIDS=()

cleanup() {
    local p
    for p in ${PIDS[@]+"${PIDS[@]}"}; do kill -TERM "$p" 2>/dev/null || true; done
    for p in ${PIDS[@]+"${PIDS[@]}"}; do wait "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ -x "$RLD" ] && [ -x "$SOAK" ] || { echo "soak: build first: make soak" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "soak: redis-server is missing: make deps" >&2; exit 1; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# Starts ratelimitd on config $1 in $TMP; sets RLD_PID and RLD_PORT.
start_rld() {
    "$RLD" --config "$1" --port 0 > "$TMP/out" 2> "$TMP/err" &
    RLD_PID=$!
    PIDS+=("$RLD_PID")
    for _ in $(seq 100); do
        RLD_PORT=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$TMP/out")
        [ -n "$RLD_PORT" ] && return 0
        sleep 0.1
    done
    echo "soak: ratelimitd did not start:" >&2
    cat "$TMP/err" >&2
    exit 1
}

rules='"levels": [{"name": "user", "rules": [{"type": "token_bucket", "capacity": 10,
    "per_second": 5}]}, {"name": "global", "default_key": "*", "rules": [{"type":
    "token_bucket", "capacity": 1000, "per_second": 500}]}]'

for store in $STORES; do
    case $store in
    memory) echo "{\"threads\": 2, $rules}" > "$TMP/cfg.json" ;;
    redis)
        rport=$(free_port)
        redis-server --port "$rport" --bind 127.0.0.1 --dir "$TMP" --save '' --appendonly no \
            > "$TMP/redis.log" 2>&1 &
        PIDS+=("$!")
        for _ in $(seq 100); do
            redis-cli -p "$rport" ping 2>/dev/null | grep -q PONG && break
            sleep 0.1
        done
        echo "{\"store\": {\"type\": \"redis\", \"url\": \"redis://127.0.0.1:$rport/0\"}, $rules}" \
            > "$TMP/cfg.json"
        ;;
    *) echo "soak: unknown store $store" >&2; exit 1 ;;
    esac
    start_rld "$TMP/cfg.json"
    echo "# $store store: $CLIENTS clients, $SECONDS_ s, $KEYS users" >&2
    before=$(rss_kb "$RLD_PID")
    "$SOAK" "$RLD_PORT" "$CLIENTS" "$SECONDS_" "$KEYS" | sed "s/^/${store}_/"
    after=$(rss_kb "$RLD_PID")
    echo "${store}_rss_before_kb: $before"
    echo "${store}_rss_after_kb: $after"
    kill -TERM "$RLD_PID"
    wait "$RLD_PID" || { echo "soak: ratelimitd exited with $?" >&2; cat "$TMP/err" >&2; exit 1; }
done
