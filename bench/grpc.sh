# bench/grpc.sh - sourced by bench/run.sh: ShouldRateLimit over gRPC against POST /acquire on
# the same daemon, in alternating rounds, with h2load (nghttp2-client) for both: the same
# decision (user u1, team t1, global; every one allowed), the same number of requests in
# flight (64: HTTP/2 4 connections x 16 streams; HTTP/1.1 64 connections, keep-alive).
# Figures: decisions/s, p99 (from h2load's per-request log) and the daemon's CPU microseconds
# per decision; medians of the rounds.

# A RateLimitRequest {domain: "bench", descriptors: [{entries: [{user: u1}, {team: t1}]}]},
# length-prefixed (gRPC: flag 0, 4-byte length 33), written byte by byte.
grpc_request() {
    printf '\x00\x00\x00\x00\x21'
    printf '\x0a\x05bench'
    printf '\x12\x18'
    printf '\x0a\x0a\x0a\x04user\x12\x02u1'
    printf '\x0a\x0a\x0a\x04team\x12\x02t1'
}

# h2load against one target; appends "<name>_rps", "_p99_ms", "_cpu_us_per_request",
# "_errors" lines to $out.
h2load_round() {
    local name=$1 pid=$2 out=$3 f=$TMP/h2load.$RANDOM c0 c1
    shift 3
    c0=$(cpu_ticks "$pid")
    h2load -D "$DURATION" -t 2 --log-file="$f.log" "$@" >"$f" 2>&1 ||
        fail "h2load failed on $name: $(tail -5 "$f")"
    c1=$(cpu_ticks "$pid")
    local rps n errs p99
    rps=$(awk '/^finished in/ { sub(/,/, "", $4); print $4 }' "$f")
    n=$(awk '/^requests:/ { print $8 }' "$f")       # succeeded
    errs=$(awk '/^requests:/ { print $10 + $12 }' "$f") # failed + errored
    [ -n "$n" ] && [ "$n" -gt 0 ] || fail "h2load served nothing on $name: $(cat "$f")"
    # the log: start time, status, microseconds from request to response
    p99=$(awk '{ print $3 }' "$f.log" | sort -n | awk '{ v[NR] = $1 } END {
        i = int(NR * 0.99); if (i < 1) i = 1; printf "%.3f", v[i] / 1000 }')
    rm -f "$f.log"
    awk -v c="$((c1 - c0))" -v hz="$HZ" -v n="$n" -v name="$name" -v rps="$rps" \
        -v p99="$p99" -v e="$errs" 'BEGIN {
        printf "%s_rps %s\n%s_p99_ms %s\n", name, rps, name, p99;
        printf "%s_cpu_us_per_request %.2f\n%s_errors %d\n", name, c / hz * 1e6 / n, name, e }' \
        >>"$out"
    log "$name: $rps decisions/s, p99 $p99 ms, errors $errs"
}

grpc_bench() {
    command -v h2load >/dev/null || fail "h2load is missing: run make deps (as root)"
    command -v nghttp >/dev/null || fail "nghttp is missing: run make deps (as root)"
    local cfg=$TMP/grpc.json rounds=$TMP/grpc.rounds req=$TMP/grpc.req body=$TMP/acquire.json
    sed -e "s|@THREADS@|$THREADS|g" "$HERE/grpc.json.in" >"$cfg"
    grpc_request >"$req"
    printf '{"keys": {"user": "u1", "team": "t1"}}' >"$body"
    start_rld "$cfg" --grpc-port 0
    local gport
    for _ in $(seq 100); do
        gport=$(sed -n 's/^grpc listening on .*:\([0-9]*\)$/\1/p' "$TMP"/rld.*/stdout | tail -1)
        [ -n "$gport" ] && break
        sleep 0.05
    done
    [ -n "$gport" ] || fail "ratelimitd printed no gRPC port"
    local url=http://127.0.0.1:$gport/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
    local grpc_h=(-H 'content-type: application/grpc' -H 'te: trailers')
    # the pre-encoded request is answered grpc-status 0 with overall_code OK (field 1 = 1)
    nghttp -v -d "$req" "${grpc_h[@]}" "$url" >"$TMP/nghttp.out" 2>&1 || true
    grep -q 'grpc-status: 0' "$TMP/nghttp.out" ||
        fail "ShouldRateLimit did not answer grpc-status 0: $(tail -20 "$TMP/nghttp.out")"
    log "gRPC: ratelimitd (pid $RLD_PID, HTTP port $RLD_PORT, gRPC port $gport), $THREADS" \
        "workers; h2load -D $DURATION, 64 requests in flight, $ROUNDS rounds"
    DURATION=3 h2load_round warm "$RLD_PID" /dev/null -c 4 -m 16 -d "$req" "${grpc_h[@]}" "$url"
    DURATION=3 h2load_round warm "$RLD_PID" /dev/null --h1 -c 64 -m 1 -d "$body" \
        -H 'content-type: application/json' "http://127.0.0.1:$RLD_PORT/acquire"
    : >"$rounds"
    for r in $(seq "$ROUNDS"); do
        log "round $r of $ROUNDS"
        h2load_round grpc "$RLD_PID" "$rounds" -c 4 -m 16 -d "$req" "${grpc_h[@]}" "$url"
        h2load_round acquire "$RLD_PID" "$rounds" --h1 -c 64 -m 1 -d "$body" \
            -H 'content-type: application/json' "http://127.0.0.1:$RLD_PORT/acquire"
    done
    stop_rld
    local name m vals
    for name in grpc acquire; do
        for m in rps p99_ms cpu_us_per_request errors; do
            vals=$(awk -v k="${name}_$m" '$1 == k { print $2 }' "$rounds")
            # shellcheck disable=SC2086
            eval "GRPC_${name}_${m}=\$(median \$vals)"
            case $name in
            grpc) emit "grpc_should_rate_limit_$m" "$(eval echo "\$GRPC_${name}_${m}")" ;;
            acquire) emit "grpc_run_acquire_h1_$m" "$(eval echo "\$GRPC_${name}_${m}")" ;;
            esac
        done
    done
    # per round, gRPC against /acquire a few seconds apart; the medians of the rounds' ratios
    for m in rps cpu_us_per_request p99_ms; do
        # shellcheck disable=SC2046
        v=$(median $(awk -v a="grpc_$m" -v b="acquire_$m" '
            $1 == a { x[++na] = $2 } $1 == b { y[++nb] = $2 }
            END { for (i = 1; i <= na && i <= nb; i++) if (y[i] > 0) print x[i] / y[i] }' \
            "$rounds"))
        [ "$v" = n/a ] || v=$(awk -v v="$v" 'BEGIN { printf "%.2f", v }')
        eval "GRPC_ratio_$m=\$v"
    done
}
