#!/bin/bash
# bench/run.sh - the benchmarks of issue 5, run by `make bench` after an optimised build.
#
#   bench/run.sh [BUILD_DIR]        (default build-bench)
#
# Starts what it needs on free loopback ports, each with its own temporary directory, stops
# everything afterwards (also when interrupted or when a step fails), and prints one
# "name: value" line per figure, then the ratios. Progress goes to stderr; stdout holds only
# figures, so `make bench > results.txt` keeps them. Nothing here asserts a figure.
#
# Environment:
#   BENCH_ROUNDS=5        rounds of the HTTP comparison (each server once per round, in turn);
#                         the figures are the medians of the rounds
#   BENCH_DURATION=10     seconds per wrk run
#   BENCH_CORE_RUNS=3     runs of the in-process benchmark (medians)
#   BENCH_CORE_MAX=10000000   largest key count of the in-process benchmark
#   BENCH_MEM_USERS=1000000   distinct users of the memory runs
#   BENCH_MEM_REQUESTS=10000000   requests of the second memory figure
#   BENCH_SECTIONS="http grpc core usage memory idle redis cluster flood lease adaptive"   the sections to run
#   BENCH_ADAPTIVE_PHASE=60   seconds (simulated) of each capacity phase of the adaptive section
#   BENCH_REDIS_ROUNDS=3  rounds of the Redis comparison (redis-benchmark and ratelimitd in turn)
#   BENCH_CLUSTER_ROUNDS=3  rounds of one Redis against a 3-primary cluster (in turn)
#   REDIS_THREADS=0       ratelimitd's threads in the Redis section; 0: its default with the Redis
#                         store (one per CPU, at least 8 per pooled connection: 16)
#   REDIS_POOL=           the store's pool (connections) in the Redis section; empty: its default
#   FLOOD_RATE=2000 FLOOD_SECONDS=10   the flood of one key in the flood section
#   LEASE_RATE=2000 LEASE_SECONDS=10   the requests over four instances in the lease section
set -eu
set -o pipefail

BUILD=${1:-build-bench}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=$(cd "$ROOT" && cd "$BUILD" && pwd)
RLD=$BUILD/ratelimitd
LOADGEN=$BUILD/bench/loadgen
CORE=$BUILD/bench/bench_core
ROUNDS=${BENCH_ROUNDS:-5}
DURATION=${BENCH_DURATION:-10}
CORE_RUNS=${BENCH_CORE_RUNS:-3}
CORE_MAX=${BENCH_CORE_MAX:-10000000}
MEM_USERS=${BENCH_MEM_USERS:-1000000}
MEM_REQUESTS=${BENCH_MEM_REQUESTS:-10000000}
SECTIONS=${BENCH_SECTIONS:-http grpc core usage memory idle redis cluster flood lease adaptive}
ADAPTIVE_PHASE=${BENCH_ADAPTIVE_PHASE:-60}
REDIS_ROUNDS=${BENCH_REDIS_ROUNDS:-3}
CLUSTER_ROUNDS=${BENCH_CLUSTER_ROUNDS:-3}
THREADS=2 # ratelimitd threads and nginx workers: one per core of the reference machine
WRK_THREADS=2
WRK_CONNS=64

export BENCH_DIR=$HERE # the wrk scripts find wrk_common.lua there
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlbench.XXXXXX")
PIDS=()          # processes we started (ratelimitd, redis-server)
NGINX_PREFIXES=() # nginx daemonises: stopped through its pid file

log() { echo "# $*" >&2; }
fail() { echo "bench: $*" >&2; exit 1; }

cleanup() {
    local p
    for p in ${NGINX_PREFIXES[@]+"${NGINX_PREFIXES[@]}"}; do
        [ -f "$p/nginx.pid" ] && kill -QUIT "$(cat "$p/nginx.pid")" 2>/dev/null || true
    done
    for p in ${PIDS[@]+"${PIDS[@]}"}; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in ${PIDS[@]+"${PIDS[@]}"}; do
        wait "$p" 2>/dev/null || true
    done
    # nginx's master leaves once its workers are done; give it a moment before removing its dir
    for p in ${NGINX_PREFIXES[@]+"${NGINX_PREFIXES[@]}"}; do
        for _ in $(seq 50); do [ -f "$p/nginx.pid" ] || break; sleep 0.1; done
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for tool in wrk nginx awk; do
    command -v "$tool" >/dev/null || fail "$tool is missing: run make deps (as root)"
done
[ -x "$RLD" ] && [ -x "$LOADGEN" ] && [ -x "$CORE" ] || fail "build first: make bench"

# ---- helpers -------------------------------------------------------------------------------

emit() { printf '%s: %s\n' "$1" "$2"; }

# median of the arguments (numbers)
median() {
    [ $# -gt 0 ] || { echo n/a; return; }
    printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {
        if (NR % 2) print v[(NR + 1) / 2];
        else printf "%.10g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ratio a / b with 2 decimals ("n/a" when either is missing)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "n/a" || b == "n/a" || b + 0 == 0)
    print "n/a"; else printf "%.2f\n", a / b }'; }

# value of "name: value" in a file
field() { awk -v k="$1:" '$1 == k { print $2; exit }' "$2"; }

# utime + stime (clock ticks) of a process and its direct children (nginx's workers)
cpu_ticks() {
    # processes may come and go while the list is read: missing files are skipped
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v root="$1" '{
        # the command may hold spaces: fields are counted after its closing parenthesis
        s = $0; sub(/^.*\) /, "", s); split(s, f, " ");
        pid = $1; ppid = f[2];
        if (pid == root || ppid == root) t += f[12] + f[13]
    } END { print t + 0 }'
}
HZ=$(getconf CLK_TCK)

rss_kib() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status"; }

free_port() { "$LOADGEN" --free-port; }

# Starts ratelimitd with a config (and extra flags) on a free port; sets RLD_PID and RLD_PORT.
# Returns 1 (with the reason in RLD_ERROR) when it does not come up.
try_start_rld() {
    local cfg=$1 dir=$TMP/rld.$RANDOM
    shift
    mkdir -p "$dir"
    # In a session of its own, as nginx (which daemonises) is: with the kernel's autogroup
    # scheduling a session is a scheduling group, and a server sharing the group of wrk (or of
    # this script) would get a different share of the CPU than one in its own.
    (cd "$dir" && exec setsid "$RLD" --config "$cfg" --port 0 "$@" >"$dir/stdout" \
        2>"$dir/stderr") &
    RLD_PID=$!
    PIDS+=("$RLD_PID")
    RLD_PORT=
    RLD_ERROR=
    for _ in $(seq 100); do
        RLD_PORT=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$dir/stdout" 2>/dev/null)
        [ -n "$RLD_PORT" ] && return 0
        if ! kill -0 "$RLD_PID" 2>/dev/null; then
            RLD_ERROR=$(tail -n 1 "$dir/stderr")
            return 1
        fi
        sleep 0.05
    done
    RLD_ERROR="ratelimitd did not print its port"
    return 1
}

start_rld() {
    try_start_rld "$@" || fail "ratelimitd did not start: $RLD_ERROR"
}

stop_rld() {
    kill -TERM "$RLD_PID" 2>/dev/null || true
    wait "$RLD_PID" 2>/dev/null || true
}

# GET a path with a bare request over bash's /dev/tcp (no curl needed); prints the body.
http_get() {
    local port=$1 path=$2
    exec 9<>"/dev/tcp/127.0.0.1/$port"
    printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$path" >&9
    sed '1,/^\r$/d' <&9
    exec 9<&-
}

# POST a JSON body; prints the response's body.
http_post() {
    local port=$1 path=$2 body=$3
    exec 9<>"/dev/tcp/127.0.0.1/$port"
    printf 'POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: %s\r\n%s\r\n\r\n%s' \
        "$path" application/json "Content-Length: ${#body}" "$body" >&9
    sed '1,/^\r$/d' <&9
    exec 9<&-
}

rld_keys() { http_get "$1" /metrics | awk '/^ratelimit_keys\{/ { n += $2 } END { print n + 0 }'; }

# ---- 1. HTTP against nginx -------------------------------------------------------------------

# Runs wrk against a server; appends "name: value" lines (requests/s, p50, p99, CPU per
# request) for one round to $out.
wrk_round() {
    local name=$1 pid=$2 url=$3 script=$4 out=$5 c0 c1 f=$TMP/wrk.$RANDOM
    shift 5
    c0=$(cpu_ticks "$pid")
    wrk -t"$WRK_THREADS" -c"$WRK_CONNS" -d"${DURATION}s" -s "$HERE/$script" "$url" \
        "$@" >"$f" 2>&1 || fail "wrk failed on $name: $(cat "$f")"
    c1=$(cpu_ticks "$pid")
    local n rps p50 p99 errs non2xx
    n=$(field wrk_requests "$f")
    rps=$(field wrk_rps "$f")
    p50=$(field wrk_p50_ms "$f")
    p99=$(field wrk_p99_ms "$f")
    errs=$(field wrk_errors "$f")
    non2xx=$(field wrk_non2xx "$f")
    [ -n "$n" ] && [ "$n" -gt 0 ] || fail "wrk served nothing on $name: $(cat "$f")"
    awk -v c="$((c1 - c0))" -v hz="$HZ" -v n="$n" -v name="$name" -v rps="$rps" \
        -v p50="$p50" -v p99="$p99" -v e="$errs" -v x="$non2xx" 'BEGIN {
        printf "%s_rps %s\n%s_p50_ms %s\n%s_p99_ms %s\n", name, rps, name, p50, name, p99;
        printf "%s_cpu_us_per_request %.2f\n", name, c / hz * 1e6 / n;
        printf "%s_errors %d\n%s_non2xx %d\n", name, e, name, x }' >>"$out"
    log "$name: $rps requests/s, p50 $p50 ms, p99 $p99 ms, non-2xx $non2xx, errors $errs"
}

section_http() {
    local ngx=$TMP/nginx port cfg=$TMP/http.json rounds=$TMP/http.rounds check=0
    mkdir -p "$ngx"
    port=$(free_port)
    sed -e "s|@PREFIX@|$ngx|g" -e "s|@PORT@|$port|g" -e "s|@WORKERS@|$THREADS|g" \
        "$HERE/nginx.conf.in" >"$ngx/nginx.conf"
    NGINX_PREFIXES+=("$ngx")
    nginx -p "$ngx" -c "$ngx/nginx.conf" -e "$ngx/error.log" ||
        fail "nginx did not start: $(cat "$ngx/error.log" 2>/dev/null)"
    for _ in $(seq 100); do [ -s "$ngx/nginx.pid" ] && break; sleep 0.05; done
    local ngx_pid
    ngx_pid=$(cat "$ngx/nginx.pid")

    sed -e "s|@THREADS@|$THREADS|g" "$HERE/http.json.in" >"$cfg"
    start_rld "$cfg"
    local rld_pid=$RLD_PID rld_port=$RLD_PORT
    # GET /check is measured when the daemon serves it (an older build answers 404)
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$rld_port/check")" = 200 ]
    then check=1; fi

    log "HTTP: nginx (pid $ngx_pid, port $port) and ratelimitd (pid $rld_pid, port" \
        "$rld_port), $THREADS workers each; wrk -t$WRK_THREADS -c$WRK_CONNS -d${DURATION}s," \
        "$ROUNDS rounds"
    # warm-up: every server sees the whole key space once before it is measured
    DURATION=3 wrk_round warm "$ngx_pid" "http://127.0.0.1:$port/" wrk_headers.lua /dev/null
    DURATION=3 wrk_round warm "$rld_pid" "http://127.0.0.1:$rld_port/" wrk_acquire.lua \
        /dev/null
    : >"$rounds"
    for r in $(seq "$ROUNDS"); do
        log "round $r of $ROUNDS"
        wrk_round nginx "$ngx_pid" "http://127.0.0.1:$port/" wrk_headers.lua "$rounds"
        wrk_round acquire "$rld_pid" "http://127.0.0.1:$rld_port/" wrk_acquire.lua "$rounds"
        if [ "$check" = 1 ]; then
            wrk_round check "$rld_pid" "http://127.0.0.1:$rld_port/" wrk_headers.lua \
                "$rounds" -- /check
        fi
    done
    stop_rld
    kill -QUIT "$ngx_pid" 2>/dev/null || true

    local name m
    for name in nginx check acquire; do
        for m in rps p50_ms p99_ms cpu_us_per_request non2xx; do
            local vals
            vals=$(awk -v k="${name}_$m" '$1 == k { print $2 }' "$rounds")
            if [ -n "$vals" ]; then
                # shellcheck disable=SC2086
                m_val=$(median $vals)
            else
                m_val=n/a
            fi
            eval "HTTP_${name}_${m}=\$m_val"
            [ "$name" = check ] && [ "$check" = 0 ] && continue
            case $name in
            nginx) emit "http_nginx_limit_req_$m" "$m_val" ;;
            check) emit "http_check_$m" "$m_val" ;;
            acquire) emit "http_acquire_$m" "$m_val" ;;
            esac
        done
    done
    [ "$check" = 1 ] || emit http_check "n/a (this build does not serve GET /check)"
}

# ---- 2 and 4. the core in process ---------------------------------------------------------

section_core() {
    local i f
    log "core: bench_core $CORE_MAX, $CORE_RUNS runs (1,000 to $CORE_MAX keys, 2 threads)"
    for i in $(seq "$CORE_RUNS"); do
        f=$TMP/core.$i
        "$CORE" "$CORE_MAX" >"$f" || fail "bench_core failed"
        log "core run $i: $(tr '\n' ' ' <"$f")"
    done
    local names
    names=$(awk -F: '$2 ~ /^ *-?[0-9.]+ *$/ { print $1 }' "$TMP/core.1")
    for n in $names; do
        # shellcheck disable=SC2046
        v=$(median $(cat "$TMP"/core.[0-9]* | awk -v k="$n:" '$1 == k { print $2 }'))
        emit "$n" "$v"
        eval "CORE_$n=\$v"
    done
}

# ---- model usage: a request in three dimensions against a plain one -------------------------

# Instructions per decision (callgrind) on the memory and the Redis store, and Redis's own time
# per call of the decision script: bench/callgrind_usage.sh.
section_usage() {
    log "usage: bench/callgrind_usage.sh (three dimensions and dollars against a plain request)"
    "$HERE/callgrind_usage.sh" "$BUILD" >"$TMP/usage" || fail "callgrind_usage failed"
    while read -r name value; do
        emit "${name%:}" "$value"
    done <"$TMP/usage"
}

# ---- 3. memory per key of the daemon --------------------------------------------------------

# Sends COUNT requests over USERS users starting at FIRST; fails on errors.
load() {
    local port=$1 users=$2 first=$3 count=$4 f=$TMP/load.$RANDOM
    "$LOADGEN" "$port" "$users" "$first" "$count" 8 16 >"$f" || fail "loadgen: $(cat "$f")"
    log "loadgen: $(tr '\n' ' ' <"$f")"
}

section_memory() {
    local cfg=$TMP/mem.json r0 r1 r2 keys1 keys2
    # one token bucket per user that refills slowly: every key stays active for the run
    cat >"$cfg" <<EOF
{"threads": $THREADS, "store": "memory",
 "levels": [{"name": "user", "rules": [{"type": "token_bucket", "name": "user",
                                        "capacity": 1000, "per_second": 0.001}]}]}
EOF
    start_rld "$cfg"
    r0=$(rss_kib "$RLD_PID")
    log "memory: $MEM_USERS distinct users, then $MEM_REQUESTS requests over them" \
        "(ratelimitd pid $RLD_PID, VmRSS at start $r0 KiB)"
    load "$RLD_PORT" "$MEM_USERS" 0 "$MEM_USERS"
    r1=$(rss_kib "$RLD_PID")
    keys1=$(rld_keys "$RLD_PORT")
    load "$RLD_PORT" "$MEM_USERS" 0 "$MEM_REQUESTS"
    r2=$(rss_kib "$RLD_PID")
    keys2=$(rld_keys "$RLD_PORT")
    stop_rld
    emit memory_rss_start_kib "$r0"
    emit memory_keys_after_users "$keys1"
    MEM_per_key=$(awk -v a="$r1" -v b="$r0" -v n="$MEM_USERS" \
        'BEGIN { printf "%.1f", (a - b) * 1024 / n }')
    emit memory_bytes_per_key "$MEM_per_key"
    emit memory_keys_after_requests "$keys2"
    MEM_per_key_after=$(awk -v a="$r2" -v b="$r0" -v n="$MEM_USERS" \
        'BEGIN { printf "%.1f", (a - b) * 1024 / n }')
    emit memory_bytes_per_key_after_requests "$MEM_per_key_after"
}

section_idle() {
    local cfg=$TMP/idle.json r0 r1 r2 k1 k2 t=0
    # Buckets that are full again 0.1 s after a request. The daemon runs with --manual-clock
    # so that all the keys exist at once (the clock stands still while they are made: with the
    # real clock the first keys would go idle before the last are made); one dry run then
    # moves the clock an hour on, and the housekeeping thread's sweep (ten ticks a second) finds
    # every key idle.
    cat >"$cfg" <<EOF
{"threads": $THREADS, "store": "memory",
 "levels": [{"name": "user", "rules": [{"type": "token_bucket", "name": "user",
                                        "capacity": 10, "per_second": 10}]}]}
EOF
    start_rld "$cfg" --manual-clock
    r0=$(rss_kib "$RLD_PID")
    log "idle: $MEM_USERS users, then wait for the housekeeping sweep (pid $RLD_PID)"
    load "$RLD_PORT" "$MEM_USERS" 0 "$MEM_USERS"
    r1=$(rss_kib "$RLD_PID")
    k1=$(rld_keys "$RLD_PORT")
    http_post "$RLD_PORT" /acquire '{"keys": {"user": "clock"}, "dry_run": true, "now": 3600}' \
        >/dev/null
    while [ "$t" -lt 600 ]; do
        sleep 0.1
        t=$((t + 1))
        k2=$(rld_keys "$RLD_PORT")
        [ "$k2" = 0 ] && break
    done
    sleep 1 # a few more ticks: a segment shrinks when its pass ends
    k2=$(rld_keys "$RLD_PORT")
    r2=$(rss_kib "$RLD_PID")
    stop_rld
    emit idle_keys_before "$k1"
    emit idle_rss_growth_before_kib "$((r1 - r0))"
    emit idle_keys_after "$k2"
    emit idle_rss_growth_after_kib "$((r2 - r0))"
    emit idle_seconds_to_zero_keys "$(awk -v t="$t" 'BEGIN { printf "%.1f", t / 10 }')"
    IDLE_growth_after=$((r2 - r0))
    IDLE_growth_before=$((r1 - r0))
}

# ---- 5. Redis -------------------------------------------------------------------------------

# bench/redis.sh: ratelimitd on one redis-server against redis-benchmark running the store's
# decision script (FCALL or EVALSHA, as the store sends it) at the same concurrency, and
# used_memory per active key. It reports n/a while the daemon refuses "store": "redis".
section_redis() {
    # shellcheck source=bench/redis.sh
    . "$HERE/redis.sh"
    redis_bench
}

# ---- 6. gRPC ----------------------------------------------------------------------------

# bench/grpc.sh: ShouldRateLimit (h2load, HTTP/2) against POST /acquire on the same daemon.
section_grpc() {
    # shellcheck source=bench/grpc.sh
    . "$HERE/grpc.sh"
    grpc_bench
}

# ---- 7. Redis Cluster -----------------------------------------------------------------------

# bench/cluster.sh: POST /acquire through one redis-server and through three cluster
# primaries, Redis CPU per decision, and the model of primaries per decision rate.
section_cluster() {
    # shellcheck source=bench/cluster.sh
    . "$HERE/cluster.sh"
    cluster_bench
}

# ---- 8. The cache of denials -----------------------------------------------------------------

# bench/flood.sh: one key flooded from two instances, the cache of denials off and on.
section_flood() {
    # shellcheck source=bench/flood.sh
    . "$HERE/flood.sh"
    flood_bench
}

# ---- 9. Leases ------------------------------------------------------------------------------

# bench/lease.sh: a global level leased by four instances, its Redis calls per decision.
section_lease() {
    # shellcheck source=bench/lease.sh
    . "$HERE/lease.sh"
    lease_bench
}

# ---- run --------------------------------------------------------------------------------

log "ratelimitd benchmarks: $(nproc) cores, $(uname -r), build $BUILD"
emit machine "$(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
emit kernel "$(uname -r)"
emit nginx_version "$(nginx -v 2>&1 | sed 's/.*nginx\///')"

# ---- adaptive concurrency: goodput against fixed limits --------------------------------------

# bench/adaptive.c on the manual clock (simulated time, so the figures do not depend on the
# machine): calls finished within their deadline per second while the simulated backend's
# capacity goes 40, 20, 40, for adaptive_concurrency (aimd, gradient) and fixed limits 10..80.
section_adaptive() {
    local f=$TMP/adaptive
    log "adaptive: bench/adaptive, $ADAPTIVE_PHASE s per capacity phase (simulated)"
    "$BUILD/bench/adaptive" "$ADAPTIVE_PHASE" >"$f" 2>"$f.log" || fail "bench/adaptive failed"
    cat "$f"
    ADAPTIVE_aimd=$(awk -F': ' '$1 == "adaptive_goodput_aimd" { print $2 }' "$f")
    ADAPTIVE_gradient=$(awk -F': ' '$1 == "adaptive_goodput_gradient" { print $2 }' "$f")
    ADAPTIVE_best=$(awk -F': ' '$1 == "adaptive_goodput_best_fixed" { print $2 }' "$f")
    ADAPTIVE_worst=$(awk -F': ' '$1 == "adaptive_goodput_worst_fixed" { print $2 }' "$f")
}

for s in $SECTIONS; do
    case $s in
    adaptive) section_adaptive ;;
    http) section_http ;;
    core) section_core ;;
    usage) section_usage ;;
    memory) section_memory ;;
    idle) section_idle ;;
    redis) section_redis ;;
    grpc) section_grpc ;;
    cluster) section_cluster ;;
    flood) section_flood ;;
    lease) section_lease ;;
    *) fail "unknown section $s" ;;
    esac
done

# ---- ratios (ratelimitd / nginx; core figures against the targets) --------------------------
echo "# ratios"
if [[ " $SECTIONS " == *" http "* ]]; then
    # Each round runs nginx and then ratelimitd, a few seconds apart: a ratio within a round
    # sees nearly the same machine on both sides, so the HTTP ratios are the medians of the
    # rounds' ratios (steadier than a ratio of medians when something else runs too).
    for name in acquire check; do
        for m in rps cpu_us_per_request p99_ms p50_ms; do
            # shellcheck disable=SC2046
            v=$(median $(awk -v a="${name}_$m" -v b="nginx_$m" '
                $1 == a { x[++na] = $2 } $1 == b { y[++nb] = $2 }
                END { for (i = 1; i <= na && i <= nb; i++) if (y[i] > 0) print x[i] / y[i] }' \
                "$TMP/http.rounds"))
            [ "$v" = n/a ] || v=$(awk -v v="$v" 'BEGIN { printf "%.2f", v }')
            label=${m%_ms}
            [ "$m" = cpu_us_per_request ] && label=cpu_per_request
            emit "ratio_${name}_${label}_vs_nginx" "$v"
        done
    done
fi
if [[ " $SECTIONS " == *" core "* ]]; then
    c1k=${CORE_core_ns_per_decision_1000_keys:-n/a}
    cmax=$(eval echo "\${CORE_core_ns_per_decision_${CORE_MAX}_keys:-n/a}")
    c1m=${CORE_core_ns_per_decision_1000000_keys:-n/a}
    b1m=${CORE_baseline_ns_per_decision_1000000_keys:-n/a}
    emit "ratio_core_growth_${CORE_MAX}_vs_1000_keys" "$(ratio "$cmax" "$c1k")"
    emit ratio_core_1000000_keys_vs_250ns_target "$(ratio "$c1m" 250)"
    emit ratio_core_1000000_keys_vs_baseline "$(ratio "$c1m" "$b1m")"
    emit ratio_core_1000_keys_vs_baseline \
        "$(ratio "$c1k" "${CORE_baseline_ns_per_decision_1000_keys:-n/a}")"
    # the same with every rule's status read (what an answer with limits or headers does)
    emit ratio_core_status_1000_keys_vs_baseline \
        "$(ratio "${CORE_core_status_ns_per_decision_1000_keys:-n/a}" \
            "${CORE_baseline_ns_per_decision_1000_keys:-n/a}")"
    emit ratio_core_status_1000000_keys_vs_baseline \
        "$(ratio "${CORE_core_status_ns_per_decision_1000000_keys:-n/a}" "$b1m")"
    # both threads together, per decision, against one thread: below 1 is a speed-up
    emit ratio_core_2threads_vs_1thread_1000000_keys \
        "$(ratio "${CORE_core_ns_per_decision_2threads_1000000_keys:-n/a}" "$c1m")"
fi
if [[ " $SECTIONS " == *" memory "* ]]; then
    emit ratio_memory_per_key_vs_64_bytes "$(ratio "$MEM_per_key" 64)"
    emit ratio_memory_per_key_vs_nginx_128_bytes "$(ratio "$MEM_per_key" 128)"
fi
if [ -n "${REDIS_ratio:-}" ]; then
    emit ratio_redis_acquire_vs_redis_benchmark_decision "$REDIS_ratio"
fi
if [ -n "${REDIS_ratio_minimal:-}" ]; then
    emit ratio_redis_decision_usec_vs_minimal_script "$REDIS_ratio_minimal"
fi
if [[ " $SECTIONS " == *" grpc "* ]]; then
    emit ratio_grpc_rps_vs_acquire "$GRPC_ratio_rps"
    emit ratio_grpc_cpu_per_decision_vs_acquire "$GRPC_ratio_cpu_us_per_request"
    emit ratio_grpc_p99_vs_acquire "$GRPC_ratio_p99_ms"
fi
if [ -n "${CLUSTER_ratio_cpu:-}" ]; then
    emit ratio_cluster_redis_cpu_per_decision_vs_one_redis_evalsha "$CLUSTER_ratio_cpu"
    emit ratio_cluster_redis_cpu_per_decision_vs_one_redis_fcall "$CLUSTER_ratio_cpu_fcall"
fi
if [ -n "${FLOOD_ratio:-}" ]; then
    emit ratio_flood_redis_calls_cache_off_vs_on "$FLOOD_ratio"
    emit ratio_flood_admitted_vs_limit_cache_on "$FLOOD_admitted_ratio"
fi
if [ -n "${LEASE_ratio:-}" ]; then
    emit ratio_lease_global_key_redis_calls_off_vs_on "$LEASE_ratio"
    # at least 50 decisions a call on the global key is the target
    emit ratio_lease_decisions_per_global_key_call_vs_50 "$(ratio "$LEASE_per_call" 50)"
fi
if [[ " $SECTIONS " == *" idle "* ]]; then
    emit ratio_idle_rss_growth_after_vs_before \
        "$(ratio "$IDLE_growth_after" "$IDLE_growth_before")"
fi
if [[ " $SECTIONS " == *" adaptive "* ]]; then
    emit ratio_adaptive_aimd_goodput_vs_best_fixed "$(ratio "$ADAPTIVE_aimd" "$ADAPTIVE_best")"
    emit ratio_adaptive_gradient_goodput_vs_best_fixed \
        "$(ratio "$ADAPTIVE_gradient" "$ADAPTIVE_best")"
    emit ratio_adaptive_aimd_goodput_vs_worst_fixed "$(ratio "$ADAPTIVE_aimd" "$ADAPTIVE_worst")"
fi
