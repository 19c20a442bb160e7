# shellcheck shell=bash
# bench/redis.sh - section 5 of `make bench`, sourced by bench/run.sh (it uses run.sh's
# helpers: emit, fail, log, free_port, try_start_rld, load, wrk_round...). Until the daemon
# accepts "store": "redis" it reports n/a.
#
# On one redis-server of its own: ratelimitd's POST /acquire (wrk, as in section 1) against
# redis-benchmark running the store's own decision script at the same concurrency, and Redis's
# used_memory per active key. The call is not written out here: it is taken from the daemon
# itself (redis-cli MONITOR while it decides one request), so the comparison follows the
# store's script, command (FCALL of its Functions library on Redis 7, EVALSHA before) and
# arguments as they are. In it the user's and the team's keys are replaced by
# redis-benchmark's __rand_int__, to spread the calls over keys. The two run in turn for
# BENCH_REDIS_ROUNDS rounds (3); figures are medians, the ratio the median of the rounds'.

# Prints the arguments of the decision's FCALL or EVALSHA in a MONITOR capture (the first that
# names user-0: the housekeeping tick sends calls of its own), one per line (MONITOR quotes each
# argument and escapes '"', '\' and other bytes as \xHH; the arguments are text).
monitor_args() {
    awk '(index(toupper($0), "] \"EVALSHA\"") || index(toupper($0), "] \"FCALL\"")) &&
         index($0, "\"rl:user:0:user-0\"") {
        s = substr($0, index($0, "] ") + 2)
        out = ""; inq = 0
        for (i = 1; i <= length(s); i++) {
            c = substr(s, i, 1)
            if (!inq) { if (c == "\"") { inq = 1; out = "" } continue }
            if (c == "\\") {
                d = substr(s, ++i, 1)
                if (d == "x") { out = out sprintf("%c", hex(substr(s, i + 1, 2))); i += 2 }
                else if (d == "n") out = out "\n"
                else out = out d
                continue
            }
            if (c == "\"") { print out; inq = 0; continue }
            out = out c
        }
        exit
    }
    function hex(h,   v, k) {
        v = 0
        for (k = 1; k <= 2; k++) v = v * 16 + index("0123456789abcdef", tolower(substr(h, k, 1))) - 1
        return v
    }' "$1"
}

# Redis's usec_per_call of a command (INFO commandstats) since the last CONFIG RESETSTAT.
usec_per_call() {
    redis-cli -p "$1" info commandstats | tr -d '\r' |
        awk -F'[=,:]' -v c="cmdstat_${2,,}" '$1 == c { print $7 }'
}

# The calls of a command (INFO commandstats) since the last CONFIG RESETSTAT.
command_calls() {
    redis-cli -p "$1" info commandstats | tr -d '\r' |
        awk -F'[=,:]' -v c="cmdstat_${2,,}" '$1 == c { print $3 }'
}

# Redis's own CPU (user + system, its /proc/PID/stat, every thread) per decision in µs: ticks
# between two cpu_ticks readings over the decision command's calls.
cpu_per_call() {
    awk -v t="$1" -v hz="$HZ" -v n="$2" 'BEGIN {
        if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "n/a" }'
}

# The daemon's ratelimit_redis_calls_total and _writes_total, "calls writes".
rld_redis_counts() {
    http_get "$1" /metrics | awk '$1 == "ratelimit_redis_calls_total" { c = $2 }
        $1 == "ratelimit_redis_writes_total" { w = $2 } END { print c + 0, w + 0 }'
}

# The arguments of bench/min_token_bucket.lua (EVALSHA sha, its keys, cost, each key's capacity
# and rate) for the decision call "$@" (as monitor_args prints it), read by service/redis/args.def;
# its keys are the decision's with "min:" in front (they hold hashes). Nothing when an item is not
# a token bucket.
min_args() {
    local -a a=("$@") head item
    mapfile -t head < <(awk '$1 == "decide" { for (i = 2; i <= NF; i++) print $i }' \
        "$ROOT/service/redis/args.def")
    mapfile -t item < <(awk '$1 == "decide_item" { for (i = 2; i <= NF; i++) print $i }' \
        "$ROOT/service/redis/args.def")
    local o=$((3 + a[2])) n=0 i f tag cost=
    for i in "${!head[@]}"; do [ "${head[$i]}" = items ] && n=${a[$((o + i))]}; done
    local -a keys=() params=()
    o=$((o + ${#head[@]}))
    for ((i = 0; i < n; i++)); do
        for f in "${!item[@]}"; do
            case ${item[$f]} in
            tag) tag=${a[$((o + f))]} ;;
            cost) cost=${cost:-${a[$((o + f))]}} ;;
            *) ;;
            esac
        done
        [ "$tag" = tb ] || return 0
        keys+=("min:${a[$((3 + i))]}")
        params+=("${a[$((o + ${#item[@]}))]}" "${a[$((o + ${#item[@]} + 1))]}")
        o=$((o + ${#item[@]} + 2))
    done
    printf '%s\n' EVALSHA "$MIN_SHA" "$n" "${keys[@]}" "$cost" "${params[@]}"
}

redis_bench() {
    local dir=$TMP/redis port cfg n=200000 f
    for tool in redis-server redis-cli redis-benchmark; do
        command -v "$tool" >/dev/null || fail "$tool is missing: run make deps (as root)"
    done
    mkdir -p "$dir"
    port=$(free_port)
    # in a session (and so a scheduling group) of its own, as ratelimitd and nginx are: sharing
    # the group of wrk would give Redis half the CPU it gets beside redis-benchmark
    (exec setsid redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' \
        --appendonly no >"$dir/log" 2>&1) &
    REDIS_PID=$!
    PIDS+=("$REDIS_PID")
    for _ in $(seq 100); do
        [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
        sleep 0.05
    done
    cfg=$TMP/redis.json
    local pool=${REDIS_POOL:+, \"pool\": $REDIS_POOL}
    sed -e "s|@THREADS@|${REDIS_THREADS:-0}|g" \
        -e "s|\"store\": \"memory\"|\"store\": {\"type\": \"redis\", \"url\": \"redis://127.0.0.1:$port/0\"$pool}|" \
        "$HERE/http.json.in" >"$cfg"
    # for used_memory per active key, buckets that stay partly empty (and their keys in
    # Redis) for the whole measurement: a refill of one token in 1000 s
    local memcfg=$TMP/redis-mem.json
    sed -e 's|"capacity": 100, "per_second": 100}|"capacity": 100, "per_second": 0.001}|' \
        "$cfg" >"$memcfg"
    if ! try_start_rld "$memcfg"; then
        emit redis "n/a (this ratelimitd has no Redis store: ${RLD_ERROR#*error: })"
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
        return 0
    fi
    log "redis: redis-server (pid $REDIS_PID, port $port), ratelimitd (pid $RLD_PID)"

    # used_memory per active key: one request each for MEM_USERS users (one state key each)
    local m0 m1 k1
    m0=$(redis-cli -p "$port" info memory | awk -F: '/^used_memory:/ { print $2 + 0 }')
    load "$RLD_PORT" "$MEM_USERS" 0 "$MEM_USERS"
    m1=$(redis-cli -p "$port" info memory | awk -F: '/^used_memory:/ { print $2 + 0 }')
    k1=$(redis-cli -p "$port" dbsize)
    emit redis_keys_after_users "$k1"
    emit redis_used_memory_bytes_per_key "$(awk -v a="$m1" -v b="$m0" -v k="$k1" \
        'BEGIN { if (k > 0) printf "%.1f", (a - b) / k; else print "n/a" }')"
    stop_rld
    redis-cli -p "$port" flushall >/dev/null
    try_start_rld "$cfg" || fail "ratelimitd did not start again on Redis: $RLD_ERROR"

    # the call of one decision, as the store sends it
    redis-cli -p "$port" monitor >"$dir/monitor" 2>/dev/null &
    local mon=$!
    sleep 0.3
    http_post "$RLD_PORT" /acquire '{"keys": {"user": "user-0", "team": "team-0"}}' >/dev/null
    sleep 0.3
    kill "$mon" 2>/dev/null || true
    wait "$mon" 2>/dev/null || true
    local -a args=()
    while IFS= read -r a; do
        a=${a//user-0/user-__rand_int__}
        args+=("${a//team-0/team-__rand_int__}")
    done < <(monitor_args "$dir/monitor")
    [ "${#args[@]}" -gt 3 ] || fail "no FCALL or EVALSHA seen from the Redis store"
    # the least the same decision can cost Redis: the hand-written bench/min_token_bucket.lua
    # on keys of the same shape, with the same costs and parameters (bench/lua_cost.sh)
    MIN_SHA=$(redis-cli -p "$port" -x script load <"$HERE/min_token_bucket.lua")
    local -a margs=()
    mapfile -t margs < <(min_args "${args[@]}")

    # rounds of redis-benchmark and ratelimitd in turn, as section 1 alternates its servers:
    # the figures are the medians of the rounds, the ratio the median of the rounds' ratios
    local r e d c0 c1 k0 k1 w0 w1 rounds=$TMP/redis.rounds
    local -a engines=() eusec=() ecpu=() daemons=() dusec=() dcpu=() rcpu=() p99s=() ratios=()
    local -a perwrite=() musec=() mratios=()
    f=$TMP/redis-benchmark.csv
    for r in $(seq "$REDIS_ROUNDS"); do
        log "redis round $r of $REDIS_ROUNDS"
        redis-cli -p "$port" config resetstat >/dev/null
        c0=$(cpu_ticks "$REDIS_PID")
        redis-benchmark -p "$port" -c "$WRK_CONNS" -n "$n" -r 100000 --csv "${args[@]}" \
            >"$f" 2>&1 || fail "redis-benchmark: $(cat "$f")"
        c1=$(cpu_ticks "$REDIS_PID")
        e=$(awk -F'","' 'NR == 2 { print $2 + 0 }' "$f")
        engines+=("$e")
        eusec+=("$(usec_per_call "$port" "${args[0]}")")
        ecpu+=("$(cpu_per_call "$((c1 - c0))" "$(command_calls "$port" "${args[0]}")")")
        log "redis-benchmark: $e requests/s, ${eusec[-1]} us per call in Redis, Redis CPU ${ecpu[-1]} us a call"
        if [ "${#margs[@]}" -gt 0 ]; then
            redis-cli -p "$port" config resetstat >/dev/null
            redis-benchmark -p "$port" -c "$WRK_CONNS" -n "$n" -r 100000 --csv "${margs[@]}" \
                >"$f" 2>&1 || fail "redis-benchmark (minimal script): $(cat "$f")"
            musec+=("$(usec_per_call "$port" EVALSHA)")
            mratios+=("$(ratio "${eusec[-1]}" "${musec[-1]}")")
            log "minimal script: ${musec[-1]} us per call in Redis (decision/minimal ${mratios[-1]})"
        fi

        redis-cli -p "$port" config resetstat >/dev/null
        : >"$rounds"
        read -r k0 w0 < <(rld_redis_counts "$RLD_PORT")
        c0=$(cpu_ticks "$REDIS_PID")
        wrk_round redis_acquire "$RLD_PID" "http://127.0.0.1:$RLD_PORT/" wrk_acquire.lua \
            "$rounds"
        c1=$(cpu_ticks "$REDIS_PID")
        read -r k1 w1 < <(rld_redis_counts "$RLD_PORT")
        d=$(awk '$1 == "redis_acquire_rps" { print $2 }' "$rounds")
        daemons+=("$d")
        p99s+=("$(awk '$1 == "redis_acquire_p99_ms" { print $2 }' "$rounds")")
        dusec+=("$(usec_per_call "$port" "${args[0]}")")
        dcpu+=("$(cpu_per_call "$((c1 - c0))" "$(command_calls "$port" "${args[0]}")")")
        rcpu+=("$(awk '$1 == "redis_acquire_cpu_us_per_request" { print $2 }' "$rounds")")
        perwrite+=("$(awk -v c="$((k1 - k0))" -v w="$((w1 - w0))" 'BEGIN {
            if (w > 0) printf "%.2f", c / w; else print "n/a" }')")
        log "ratelimitd: Redis CPU ${dcpu[-1]} us a decision, ${perwrite[-1]} calls a write"
        ratios+=("$(ratio "$d" "$e")")
    done
    stop_rld
    emit redis_decision_command "${args[0]^^}"
    emit redis_benchmark_decision_rps "$(median "${engines[@]}")"
    emit redis_benchmark_decision_usec_per_call "$(median "${eusec[@]}")"
    emit redis_benchmark_redis_cpu_us_per_decision "$(median "${ecpu[@]}")"
    # one Redis core runs one script at a time: 1e6 / usec_per_call decisions a second at most
    emit redis_decisions_per_second_per_core "$(awk -v u="$(median "${eusec[@]}")" \
        'BEGIN { if (u > 0) printf "%.0f", 1e6 / u; else print "n/a" }')"
    if [ "${#musec[@]}" -gt 0 ]; then
        emit redis_minimal_script_usec_per_call "$(median "${musec[@]}")"
        emit redis_decision_vs_minimal_script_per_round "${mratios[*]}"
        REDIS_ratio_minimal=$(median "${mratios[@]}")
    fi
    emit http_acquire_redis_rps "$(median "${daemons[@]}")"
    emit http_acquire_redis_p99_ms "$(median "${p99s[@]}")"
    emit http_acquire_redis_usec_per_call "$(median "${dusec[@]}")"
    emit http_acquire_redis_redis_cpu_us_per_decision "$(median "${dcpu[@]}")"
    emit http_acquire_redis_daemon_cpu_us_per_request "$(median "${rcpu[@]}")"
    emit http_acquire_redis_calls_per_write "$(median "${perwrite[@]}")"
    emit redis_ratio_per_round "$(echo "${ratios[*]}")"
    REDIS_ratio=$(median "${ratios[@]}")
}
