# shellcheck shell=bash
# bench/flood.sh - sourced by bench/run.sh (section "flood"): the cache of denials
# (store.deny_cache, docs/redis.md). One key flooded at FLOOD_RATE requests a second for
# FLOOD_SECONDS from two ratelimitd instances on one redis-server (bench/flood), against a
# bucket of 10 refilling 10 a second, with the cache off and then on: Redis's script calls
# (INFO commandstats: EVALSHA, the background duties included), the admissions, and the
# denials the instances answered from their caches.

flood_bench() {
    local dir=$TMP/flood port cfg mode calls allowed secs local_n i limit
    local rate=${FLOOD_RATE:-2000} seconds=${FLOOD_SECONDS:-10} calls_off=0 calls_on=0
    local -a ports pids
    command -v redis-server >/dev/null || fail "redis-server is missing: run make deps (as root)"
    [ -x "$BUILD/bench/flood" ] || fail "no $BUILD/bench/flood"
    mkdir -p "$dir"
    port=$(free_port)
    (exec setsid redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' \
        --appendonly no >"$dir/log" 2>&1) &
    local redis_pid=$!
    PIDS+=("$redis_pid")
    for _ in $(seq 100); do
        [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
        sleep 0.05
    done
    for mode in off on; do
        cfg=$dir/$mode.json
        cat >"$cfg" <<JSON
{"store": {"type": "redis", "url": "redis://127.0.0.1:$port/0", "prefix": "$mode:",
           "timeout_ms": 2000, "deny_cache": $([ "$mode" = on ] && echo true || echo false)},
 "levels": [{"name": "user", "on_store_error": "closed",
             "rules": [{"type": "token_bucket", "name": "user", "capacity": 10,
                        "per_second": 10}]}]}
JSON
        ports=()
        pids=()
        for i in 0 1; do
            start_rld "$cfg"
            ports+=("$RLD_PORT")
            pids+=("$RLD_PID")
        done
        redis-cli -p "$port" config resetstat >/dev/null
        log "flood: $rate requests a second for $seconds s, the cache $mode"
        "$BUILD/bench/flood" "$rate" "$seconds" '{"keys": {"user": "alice"}}' \
            "${ports[0]}" "${ports[1]}" >"$dir/$mode.out"
        calls=$(redis-cli -p "$port" info commandstats | tr -d '\r' |
            awk -F'[=,:]' '$1 == "cmdstat_evalsha" { print $3 }')
        allowed=$(field flood_allowed "$dir/$mode.out")
        secs=$(field flood_seconds "$dir/$mode.out")
        local_n=0
        for i in 0 1; do
            local_n=$((local_n + $(http_get "${ports[$i]}" /metrics |
                awk '$1 == "ratelimit_deny_cache_total{level=\"user\"}" { print $2 + 0 }')))
        done
        for i in 0 1; do
            kill -TERM "${pids[$i]}" 2>/dev/null || true
            wait "${pids[$i]}" 2>/dev/null || true
        done
        emit "flood_${mode}_requests_per_second" "$(field flood_rps "$dir/$mode.out")"
        emit "flood_${mode}_redis_script_calls" "${calls:-0}"
        emit "flood_${mode}_admitted" "$allowed"
        limit=$(awk -v t="$secs" 'BEGIN { printf "%d", 10 + 10 * t }')
        emit "flood_${mode}_admitted_limit" "$limit"
        emit "flood_${mode}_denied_from_cache" "$local_n"
        if [ "$mode" = off ]; then calls_off=${calls:-0}; else calls_on=${calls:-0}; fi
        # shellcheck disable=SC2034 # read by run.sh's ratios (at most 1: never beyond the limit)
        [ "$mode" = on ] && FLOOD_admitted_ratio=$(ratio "$allowed" "$limit")
    done
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    # shellcheck disable=SC2034 # read by run.sh's ratios
    FLOOD_ratio=$(ratio "$calls_off" "$calls_on")
}
