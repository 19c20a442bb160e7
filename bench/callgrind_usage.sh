#!/bin/sh
# bench/callgrind_usage.sh [BUILD_DIR] - instructions per decision of a request counted in three
# dimensions (dollars, input and output tokens, with its model's prices) against a plain one on
# the same three levels (bench/bench_usage.c), under valgrind's callgrind: on the memory store
# and on a Redis store (the daemon's side: planning, the script's arguments, the reply), and
# Redis's own microseconds per call of the decision script for each (INFO commandstats, outside
# callgrind). Each instruction figure is the difference between a run of 2N and one of N
# decisions, over N: the marginal cost of a decision on keys that exist. Prints "name: value"
# lines; make bench runs it (bench/run.sh's usage section).
set -eu
BUILD=${1:-build-bench}
BIN=$BUILD/bench/bench_usage
command -v valgrind >/dev/null || { echo "callgrind_usage: valgrind is missing" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "callgrind_usage: redis-server is missing" >&2; exit 1; }
[ -x "$BIN" ] || { echo "callgrind_usage: build first: make BUILD=$BUILD $BIN" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlcgu.XXXXXX")
REDIS_PID=
trap '[ -z "$REDIS_PID" ] || kill "$REDIS_PID" 2>/dev/null; rm -rf "$TMP"' EXIT

incl() {
    callgrind_annotate --inclusive=yes "$1" 2>/dev/null |
        awk -v f="$2" '{ line = $0; if (!sub(/\( *[0-9.]+%\)/, "", line)) next
            split(line, w); if (w[2] !~ ("^bench/bench_usage\\.c:" f "(\\.|$)")) next
            gsub(",", "", w[1]); print w[1]; exit }'
}

# per-decision instructions of plain_run and usage_run: $1 the store ("mem" or "redis URL"),
# $2 N, $3 the figures' prefix
measure() {
    n=$2
    for k in 1 2; do
        # shellcheck disable=SC2086
        valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.$k" "$BIN" $1 $((n * k)) \
            >/dev/null 2>"$TMP/log.$k" || { cat "$TMP/log.$k" >&2; exit 1; }
    done
    for f in plain_run usage_run; do
        a=$(incl "$TMP/cg.1" "$f")
        b=$(incl "$TMP/cg.2" "$f")
        [ -n "$a" ] && [ -n "$b" ] || { echo "callgrind_usage: no figure for $f" >&2; exit 1; }
        awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.0f\n", (b - a) / n }' >"$TMP/$f"
    done
    p=$(cat "$TMP/plain_run")
    u=$(cat "$TMP/usage_run")
    echo "${3}_plain_instructions_per_decision: $p"
    echo "${3}_usage_instructions_per_decision: $u"
    awk -v p="$p" -v u="$u" -v x="$3" 'BEGIN { printf "%s_usage_to_plain_instructions: %.2f\n", x, u / p }'
}

measure mem 20000 usage_memory

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    >"$TMP/redis.log" 2>&1 &
REDIS_PID=$!
i=0
until redis-cli -p "$port" ping >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 100 ] || { echo "callgrind_usage: redis-server did not start" >&2; exit 1; }
    sleep 0.05
done
measure "redis redis://127.0.0.1:$port" 2000 usage_redis
"$BIN" redis "redis://127.0.0.1:$port" 20000 >"$TMP/us"
p=$(awk '$1 == "redis_usec_per_call_plain:" { print $2 }' "$TMP/us")
u=$(awk '$1 == "redis_usec_per_call_usage:" { print $2 }' "$TMP/us")
echo "usage_redis_plain_script_usec_per_call: $p"
echo "usage_redis_usage_script_usec_per_call: $u"
awk -v p="$p" -v u="$u" 'BEGIN { printf "usage_redis_usage_to_plain_script_usec: %.2f\n", u / p }'
