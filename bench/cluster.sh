# shellcheck shell=bash
# bench/cluster.sh - section 7 of `make bench`, sourced by bench/run.sh (it uses run.sh's
# helpers: emit, fail, log, free_port, try_start_rld, stop_rld, field, median, cpu_ticks...).
#
# POST /acquire (wrk, the user, team and global buckets of bench/http.json.in) through
# ratelimitd on one redis-server and on a Redis Cluster of three primaries (no replicas), in
# turn for BENCH_CLUSTER_ROUNDS rounds (3), all on this machine; the scripts called with
# EVALSHA (the default), then as a Functions library with FCALL ("functions": true), whose
# setup runs once instead of on every call (three calls a decision on the cluster). Per decision: Redis's CPU time
# (utime + stime of the redis-server processes, /proc/<pid>/stat, over the wrk run) and the
# time its scripts took (usec of EVALSHA and FCALL in INFO commandstats, summed over the
# nodes), and on the cluster the busiest primary's share. From those, the model: decisions a
# second one primary can make (1e6 / its CPU us per decision), and primaries needed for a rate.
# This machine's two cores cannot show the scale-out itself: the three primaries share them.
# Then the cluster again with the global level in three shards ("shards": 3, FCALL), whose busiest
# primary bounds what the cluster can decide when one key is in every request.

# Starts a redis-server in a session of its own (see bench/redis.sh) on port $1 in dir $2 with
# more arguments; sets CLUSTER_PID.
cluster_redis_start() {
    local port=$1 dir=$2
    shift 2
    mkdir -p "$dir"
    (exec setsid redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' \
        --appendonly no "$@" >"$dir/log" 2>&1) &
    CLUSTER_PID=$!
    PIDS+=("$CLUSTER_PID")
}

cluster_wait_ping() {
    for _ in $(seq 100); do
        [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.05
    done
    fail "redis-server on port $1 did not answer"
}

# usec spent in the decision scripts (EVALSHA, FCALL) on the nodes on ports "$@"
cluster_script_usec() {
    local p
    for p in "$@"; do
        redis-cli -p "$p" info commandstats | tr -d '\r'
    done | awk -F'[=,:]' '$1 == "cmdstat_evalsha" || $1 == "cmdstat_fcall" { t += $5 }
        END { print t + 0 }'
}

# One wrk run through ratelimitd (RLD_PORT) with Redis processes $@ (pid:port each); appends
# "<name>_<figure> value" lines to $out.
cluster_round() {
    local name=$1 out=$2 f=$TMP/cluster-wrk.$RANDOM
    shift 2
    local -a pids=() ports=() c0=() c1=()
    local x i u0 u1
    for x in "$@"; do
        pids+=("${x%%:*}")
        ports+=("${x##*:}")
    done
    for p in "${ports[@]}"; do redis-cli -p "$p" config resetstat >/dev/null; done
    for i in "${!pids[@]}"; do c0[i]=$(cpu_ticks "${pids[i]}"); done
    u0=$(cluster_script_usec "${ports[@]}")
    wrk -t"$WRK_THREADS" -c"$WRK_CONNS" -d"${DURATION}s" -s "$HERE/wrk_acquire.lua" \
        "http://127.0.0.1:$RLD_PORT/" >"$f" 2>&1 || fail "wrk failed on $name: $(cat "$f")"
    u1=$(cluster_script_usec "${ports[@]}")
    for i in "${!pids[@]}"; do c1[i]=$(cpu_ticks "${pids[i]}"); done
    local n rps non2xx total=0 most=0 d
    n=$(field wrk_requests "$f")
    rps=$(field wrk_rps "$f")
    non2xx=$(field wrk_non2xx "$f")
    [ -n "$n" ] && [ "$n" -gt 0 ] || fail "wrk served nothing on $name: $(cat "$f")"
    for i in "${!pids[@]}"; do
        d=$((c1[i] - c0[i]))
        total=$((total + d))
        [ "$d" -gt "$most" ] && most=$d
    done
    awk -v name="$name" -v n="$n" -v rps="$rps" -v t="$total" -v m="$most" -v hz="$HZ" \
        -v u="$((u1 - u0))" -v x="$non2xx" 'BEGIN {
        printf "%s_rps %s\n%s_non2xx %d\n", name, rps, name, x;
        printf "%s_redis_cpu_us_per_decision %.2f\n", name, t / hz * 1e6 / n;
        printf "%s_busiest_redis_cpu_us_per_decision %.2f\n", name, m / hz * 1e6 / n;
        printf "%s_script_us_per_decision %.2f\n", name, u / n }' >>"$out"
    log "$name: $rps requests/s, Redis CPU $(awk -v t="$total" -v hz="$HZ" -v n="$n" \
        'BEGIN { printf "%.1f", t / hz * 1e6 / n }') us a decision"
}

cluster_median() { # the median of figure $1 in $2
    # shellcheck disable=SC2046
    median $(awk -v k="$1" '$1 == k { print $2 }' "$2")
}

cluster_bench() {
    local dir=$TMP/cluster rounds=$TMP/cluster.rounds r one one_pid
    local -a cports=() cpids=() seeds=()
    for tool in redis-server redis-cli; do
        command -v "$tool" >/dev/null || fail "$tool is missing: run make deps (as root)"
    done
    one=$(free_port)
    cluster_redis_start "$one" "$dir/one"
    one_pid=$CLUSTER_PID
    for i in 0 1 2; do
        # a node's bus is its port + 10000: pick ports whose bus port is free too
        local p
        for _ in $(seq 50); do
            p=$(free_port)
            [ "$p" -lt 55000 ] && ! (exec 8<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null &&
                break
        done
        cports+=("$p")
        cluster_redis_start "$p" "$dir/n$i" --cluster-enabled yes \
            --cluster-config-file nodes.conf --cluster-node-timeout 5000
        cpids+=("$CLUSTER_PID")
        seeds+=("127.0.0.1:$p")
    done
    cluster_wait_ping "$one"
    for p in "${cports[@]}"; do cluster_wait_ping "$p"; done
    redis-cli --cluster create "${seeds[@]}" --cluster-replicas 0 --cluster-yes \
        >"$dir/create.log" 2>&1 || fail "redis-cli --cluster create: $(tail -5 "$dir/create.log")"
    for _ in $(seq 200); do
        local ok=1
        for p in "${cports[@]}"; do
            redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' || ok=0
        done
        [ "$ok" = 1 ] && break
        sleep 0.05
    done
    [ "$ok" = 1 ] || fail "the cluster did not become ok"
    log "cluster: one redis-server (port $one), three primaries (ports ${cports[*]})"

    local list fn cfg_one cfg_cl
    list=$(printf '"%s", ' "${seeds[@]}")
    : >"$rounds"
    local -a cl_nodes=()
    for i in 0 1 2; do cl_nodes+=("${cpids[i]}:${cports[i]}"); done
    for fn in false true; do
        cfg_one=$TMP/cluster-one-$fn.json
        cfg_cl=$TMP/cluster-three-$fn.json
        sed -e "s|@THREADS@|${REDIS_THREADS:-0}|g" \
            -e "s|\"store\": \"memory\"|\"store\": {\"type\": \"redis\", \"url\": \"redis://127.0.0.1:$one/0\", \"functions\": $fn}|" \
            "$HERE/http.json.in" >"$cfg_one"
        sed -e "s|@THREADS@|${REDIS_THREADS:-0}|g" \
            -e "s|\"store\": \"memory\"|\"store\": {\"type\": \"redis\", \"cluster\": [${list%, }], \"functions\": $fn}|" \
            "$HERE/http.json.in" >"$cfg_cl"
        local tag=evalsha
        [ "$fn" = true ] && tag=fcall
        for r in $(seq "$CLUSTER_ROUNDS"); do
            log "cluster round $r of $CLUSTER_ROUNDS ($tag)"
            try_start_rld "$cfg_one" || fail "ratelimitd did not start on Redis: $RLD_ERROR"
            cluster_round "one_redis_$tag" "$rounds" "$one_pid:$one"
            stop_rld
            try_start_rld "$cfg_cl" || fail "ratelimitd did not start on the cluster: $RLD_ERROR"
            cluster_round "cluster_3_$tag" "$rounds" "${cl_nodes[@]}"
            stop_rld
        done
    done
    # the global level sharded over three slots (FCALL): its one key no longer caps the cluster
    # at the busiest primary's rate
    local cfg_sh=$TMP/cluster-three-sharded.json
    sed -e 's|"name": "global", "default_key": "\*",|"name": "global", "default_key": "*", "shards": 3,|' \
        "$TMP/cluster-three-true.json" >"$cfg_sh"
    grep -q '"shards": 3' "$cfg_sh" || fail "bench/http.json.in has no global level to shard"
    for r in $(seq "$CLUSTER_ROUNDS"); do
        log "cluster round $r of $CLUSTER_ROUNDS (fcall, the global level in 3 shards)"
        try_start_rld "$cfg_sh" || fail "ratelimitd did not start on the cluster: $RLD_ERROR"
        cluster_round "cluster_3_sharded_fcall" "$rounds" "${cl_nodes[@]}"
        stop_rld
    done
    local f
    for f in rps non2xx redis_cpu_us_per_decision busiest_redis_cpu_us_per_decision \
        script_us_per_decision; do
        emit "cluster_3_primaries_sharded_global_fcall_$f" \
            "$(cluster_median "cluster_3_sharded_fcall_$f" "$rounds")"
    done
    awk -v b="$(cluster_median "cluster_3_sharded_fcall_busiest_redis_cpu_us_per_decision" \
        "$rounds")" 'BEGIN { printf "cluster_model_fcall_sharded_global_busiest_primary_cap_decisions_per_s: %.0f\n", 1e6 / b }'
    for tag in evalsha fcall; do
        for f in rps non2xx redis_cpu_us_per_decision busiest_redis_cpu_us_per_decision \
            script_us_per_decision; do
            emit "cluster_one_redis_${tag}_$f" "$(cluster_median "one_redis_${tag}_$f" "$rounds")"
            emit "cluster_3_primaries_${tag}_$f" \
                "$(cluster_median "cluster_3_${tag}_$f" "$rounds")"
        done
        # the model: a primary has 1e6 us of CPU a second
        local c1 c3 busy
        c1=$(cluster_median "one_redis_${tag}_redis_cpu_us_per_decision" "$rounds")
        c3=$(cluster_median "cluster_3_${tag}_redis_cpu_us_per_decision" "$rounds")
        busy=$(cluster_median "cluster_3_${tag}_busiest_redis_cpu_us_per_decision" "$rounds")
        awk -v t="$tag" -v c1="$c1" -v c3="$c3" -v b="$busy" 'BEGIN {
            printf "cluster_model_%s_one_redis_decisions_per_s: %.0f\n", t, 1e6 / c1;
            printf "cluster_model_%s_decisions_per_s_per_primary: %.0f\n", t, 1e6 / c3;
            printf "cluster_model_%s_busiest_primary_cap_decisions_per_s: %.0f\n", t, 1e6 / b;
            split("100000 1000000", want, " ");
            for (k = 1; k <= 2; k++)
                printf "cluster_model_%s_primaries_for_%d_decisions_per_s: %d\n", t, want[k],
                    int(want[k] * c3 / 1e6) + (want[k] * c3 % 1e6 > 0) }'
        [ "$tag" = evalsha ] && CLUSTER_ratio_cpu=$(ratio "$c3" "$c1")
        [ "$tag" = fcall ] && CLUSTER_ratio_cpu_fcall=$(ratio "$c3" "$c1")
    done
    kill "$one_pid" "${cpids[@]}" 2>/dev/null || true
    wait "$one_pid" "${cpids[@]}" 2>/dev/null || true
}
