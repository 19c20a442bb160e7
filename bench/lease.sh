# shellcheck shell=bash
# bench/lease.sh - sourced by bench/run.sh (section "lease"): a leased level (store level
# "lease", docs/redis.md "Hot keys: leases"). Four ratelimitd instances on one redis-server
# share a global level (default_key "*", one token bucket of 1,000,000 refilling 100,000 a
# second, so that nearly every request passes), leased in slices of 100; requests come at
# LEASE_RATE a second for LEASE_SECONDS, spread evenly over the four (bench/flood). Redis's
# calls that name the global key's state are counted with MONITOR (a script's own commands
# left out), and reported per decision and as decisions per call; /metrics gives what the
# leases saved. Then the same without the lease, for the calls it saves.

lease_bench() {
    local dir=$TMP/lease port cfg mode i calls decisions saved key
    local rate=${LEASE_RATE:-2000} seconds=${LEASE_SECONDS:-10} calls_off=0 calls_on=0
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
           "timeout_ms": 2000},
 "levels": [{"name": "global", "default_key": "*", "on_store_error": "closed"$(
            [ "$mode" = on ] && echo ', "lease": {"slice": 100, "ttl_ms": 60000}'),
             "rules": [{"type": "token_bucket", "name": "all", "capacity": 1000000,
                        "per_second": 100000}]}]}
JSON
        ports=()
        pids=()
        for i in 0 1 2 3; do
            start_rld "$cfg"
            ports+=("$RLD_PORT")
            pids+=("$RLD_PID")
        done
        (exec redis-cli -p "$port" monitor >"$dir/$mode.monitor" 2>&1) &
        local mon=$!
        for _ in $(seq 100); do
            [ -s "$dir/$mode.monitor" ] && break
            sleep 0.05
        done
        log "lease: $rate requests a second for $seconds s over 4 instances, the lease $mode"
        "$BUILD/bench/flood" "$rate" "$seconds" '{"keys": {}}' "${ports[@]}" >"$dir/$mode.out"
        sleep 0.2 # what Redis saw last
        kill "$mon" 2>/dev/null || true
        wait "$mon" 2>/dev/null || true
        key="\"$mode:global:0:*\""
        calls=$(grep -F "$key" "$dir/$mode.monitor" | grep -cv ' lua]' || true)
        decisions=$(($(field flood_allowed "$dir/$mode.out") + $(field flood_denied "$dir/$mode.out")))
        saved=0
        if [ "$mode" = on ]; then
            for i in 0 1 2 3; do
                saved=$(awk -v s="$saved" '$1 == "ratelimit_lease_saved_total{level=\"global\"}" {
                    s += $2 } END { printf "%d", s }' <(http_get "${ports[$i]}" /metrics))
            done
        fi
        for i in 0 1 2 3; do
            kill -TERM "${pids[$i]}" 2>/dev/null || true
            wait "${pids[$i]}" 2>/dev/null || true
        done
        emit "lease_${mode}_requests_per_second" "$(field flood_rps "$dir/$mode.out")"
        emit "lease_${mode}_decisions" "$decisions"
        emit "lease_${mode}_errors" "$(field flood_errors "$dir/$mode.out")"
        emit "lease_${mode}_global_key_redis_calls" "$calls"
        emit "lease_${mode}_global_key_redis_calls_per_decision" \
            "$(awk -v c="$calls" -v d="$decisions" 'BEGIN { printf "%.4f", d ? c / d : 0 }')"
        emit "lease_${mode}_decisions_per_global_key_redis_call" "$(ratio "$decisions" "$calls")"
        [ "$mode" = on ] && emit lease_on_decisions_answered_from_leases "$saved"
        if [ "$mode" = off ]; then calls_off=$calls; else calls_on=$calls; fi
    done
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    # shellcheck disable=SC2034 # read by run.sh's ratios
    LEASE_ratio=$(ratio "$calls_off" "$calls_on")
    # shellcheck disable=SC2034
    LEASE_per_call=$(ratio "$decisions" "$calls_on")
}
