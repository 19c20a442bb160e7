#!/bin/bash
# bench/lua_cost.sh - what one decision costs Redis inside the decision script, per rule type.
#
#   bench/lua_cost.sh [N]        (N calls per case, default 50000)
#   bench/lua_cost.sh --smoke    (300 calls per case: every case runs and answers; make lua-smoke)
#   LUA_COST_ONLY='concurrency*' bench/lua_cost.sh   (only the cases whose name matches)
#   LUA_COST_ROUNDS=3 bench/lua_cost.sh   (rounds per case, default 3; 1 with --smoke)
#   LUA_COST_IR=1 bench/lua_cost.sh 3000   (instructions instead of µs: Redis runs under
#                                           callgrind, counting inside EVALSHA and FCALL only)
#
# Starts a redis-server of its own on a free loopback port (no persistence), loads the decision
# script as the store builds it (build/bench/lua_scripts prints it: bigint.lua, lib.lua, the rule
# types' ports, decide.lua), replays one EVALSHA per case with redis-benchmark (keys spread over
# 100,000 values with __rand_int__, Redis's own clock, the arguments in the order
# service/redis/args.def gives, as service/redis/store.c writes them), and prints Redis's
# usec_per_call of EVALSHA for each case from INFO commandstats, plus used_memory per state key.
# Also the cost of the library alone (the lib + "return 1"). Each case runs with EVALSHA, then (on
# Redis 7) as FCALL of the same scripts loaded as a Functions library, as the store calls them
# there. Each case runs its own minimal hand-written script too (bench/min_<type>.lua: plain Lua
# doing the same refill-check-take on the same keys in doubles), and the case's line ends with
# its ratios to it (ratio_evalsha, ratio_fcall: the decision's usec_per_call over the minimal
# script's). A case runs in rounds (the decision, its minimal script and the FCALL in turn, N
# calls each): its figures are the medians over the rounds, each ratio the median of the rounds'
# ratios, so that a slow period of the machine shared by both sides of one round does not make
# the figure. Asserts only that every call of every case ran without an error (calls = N,
# failed_calls = 0 in INFO commandstats) and that one more call answers: so a change of
# args.def that this script does not follow stops it, which `make lua-smoke` (in `make test`)
# checks with --smoke.
#
# Cases: tb3 is the decision of `make bench` (user, team and global token buckets, the global
# key shared by every call); the others decide three rules of one type on three keys that are
# each spread over 100,000 values. The concurrency case is sent as the store sends a rule that
# holds slots: with a reservation id and the items' records, so that the decision also records
# the reservation that releases the slots or lets them expire; its minimal script holds each
# slot in a sorted set by its expiry (what any concurrency limiter must do so that a slot whose
# client is gone comes back).
set -eu
shopt -s inherit_errexit # a failing call inside $(...) stops the script
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SMOKE=
ROUNDS=${LUA_COST_ROUNDS:-3}
if [ "${1:-}" = --smoke ]; then SMOKE=1 ROUNDS=1; shift; set -- 300; fi
N=${1:-50000}
CONNS=16

for tool in redis-server redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null || { echo "lua_cost: $tool is missing: run make deps" >&2; exit 1; }
done
make -s --no-print-directory -C "$ROOT" build/bench/lua_scripts >&2
LS=$ROOT/build/bench/lua_scripts
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlluacost.XXXXXX")
port=
for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[ -n "$port" ] || { echo "lua_cost: no free port" >&2; exit 1; }
IR=${LUA_COST_IR:-}
VG=()
if [ -n "$IR" ]; then
    command -v callgrind_control >/dev/null ||
        { echo "lua_cost: valgrind is missing: run make deps" >&2; exit 1; }
    VG=(valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.%p" --collect-atstart=no
        --toggle-collect=evalShaCommand --toggle-collect=fcallCommand)
fi
"${VG[@]}" redis-server --port "$port" --bind 127.0.0.1 --dir "$TMP" --save '' --appendonly no \
    >"$TMP/log" 2>&1 &
RPID=$!
trap 'kill $RPID 2>/dev/null; wait $RPID 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 400); do
    [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
    kill -0 $RPID 2>/dev/null || break
    sleep 0.05
done
[ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] ||
    { echo "lua_cost: redis-server on port $port did not start:" >&2; cat "$TMP/log" >&2; exit 1; }
cli() { redis-cli -p "$port" "$@"; }

"$LS" decide >"$TMP/decide.lua"
{ "$LS" lib; echo "return 1"; } >"$TMP/libonly.lua"
SHA=$(cli -x script load <"$TMP/decide.lua")
LIBSHA=$(cli -x script load <"$TMP/libonly.lua")
# the Functions library as the store loads it (when this Redis has Functions)
FN=
if cli function list >/dev/null 2>&1; then
    "$LS" library >"$TMP/library.lua"
    cli -x function load replace <"$TMP/library.lua" >/dev/null 2>&1 && FN=$("$LS" fname)
fi

# the minimal scripts, by rule type tag
declare -A MINSHA
for t in tb:token_bucket gcra:gcra fw:fixed_window swc:sliding_window_counter \
    sw:sliding_window cc:concurrency; do
    MINSHA[${t%%:*}]=$(cli -x script load <"$HERE/min_${t#*:}.lua")
done

# usec_per_call of EVALSHA (or FCALL) after replaying "$@" N times; stops unless every call ran
# without an error and one more (with the keys' first values) answers (not an error, not nil)
run() {
    local ir=
    cli config resetstat >/dev/null
    [ -z "$IR" ] || { callgrind_control -z "$RPID" >/dev/null 2>&1; rm -f "$TMP"/cg.*.*; }
    redis-benchmark -p "$port" -c "$CONNS" -n "$N" -r 100000 -q "$@" >"$TMP/rb" 2>&1 ||
        { cat "$TMP/rb" >&2; exit 1; }
    if [ -n "$IR" ]; then # instructions per call instead of µs
        callgrind_control -d "$RPID" >/dev/null 2>&1
        ir=$(cat "$TMP"/cg.*.* | awk -v n="$N" '/^(summary|totals):/ { printf "%.0f", $2 / n; exit }')
        [ -n "$ir" ] || { echo "lua_cost: $1 $2: callgrind counted nothing" >&2; exit 1; }
    fi
    grep -q 'ERR\|error' "$TMP/rb" && { cat "$TMP/rb" >&2; exit 1; }
    local stat
    stat=$(cli info commandstats | tr -d '\r' |
        awk -F'[=,]' '/^cmdstat_(evalsha|fcall):/ { print $2, $6, $10 }')
    set -- "${@//__rand_int__/000000000001}"
    local reply
    reply=$(cli --no-raw "$@" 2>&1)
    case $reply in
    '' | '(error)'* | '(nil)') echo "lua_cost: $1 $2 answered: $reply" >&2; exit 1 ;;
    *) ;;
    esac
    read -r calls usec failed <<<"$stat"
    [ "${calls:-0}" = "$N" ] && [ "${failed:-1}" = 0 ] ||
        { echo "lua_cost: $1 $2: $calls calls of $N, $failed failed" >&2; exit 1; }
    printf '%s' "${ir:-$usec}"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
# the median of the arguments (numbers; the lower middle one of an even count)
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# the fields of an argument list of service/redis/args.def, in order
fields() {
    awk -v l="$1" '$1 == l { for (i = 2; i <= NF; i++) print $i }' "$ROOT/service/redis/args.def"
}
mapfile -t HEAD_FIELDS < <(fields decide)
mapfile -t ITEM_FIELDS < <(fields decide_item)

# Every field's value as service/redis/store.c's build_decide and ab_decide_item write it, by
# name: a decision on Redis's clock, not dry, no reservation, every item blocking and taking,
# nothing kept for undo (not a cluster). items, tag and key are filled in per call.
declare -A HEAD=([now]='' [dry]=0 [cost]=1000000 [usage]='' [reservation_ttl]=60000000000 [floor_ms]=0
    [hold_ms]=120000 [id]='' [reserve]=0 [modes]='' [keep]=0 [general]='' [items]='')
declare -A ITEM=([tag]='' [key]='' [need]=1000000 [cost]=1000000 [wait]='' [record]='')
# a field args.def gained that this script does not know would shift every argument after it
for f in "${HEAD_FIELDS[@]}"; do
    [ -v "HEAD[$f]" ] ||
        { echo "lua_cost: args.def's decide field $f is not set here" >&2; exit 1; }
done
for f in "${ITEM_FIELDS[@]}"; do
    [ -v "ITEM[$f]" ] ||
        { echo "lua_cost: args.def's decide_item field $f is not set here" >&2; exit 1; }
done

# one item: tag, key index, p1, p2 (the rule's parameters in fixed point / ns, in its port's
# order), cost 1
item() {
    local f
    ITEM[tag]=$1 ITEM[key]=$2
    for f in "${ITEM_FIELDS[@]}"; do printf '%s\n' "${ITEM[$f]}"; done
    printf '%s\n' "$3" "$4"
}

# a decision's arguments before its items (for $1 items)
decide_head() {
    local f
    HEAD[items]=$1
    for f in "${HEAD_FIELDS[@]}"; do printf '%s\n' "${HEAD[$f]}"; done
}

# MIN: the minimal script's tag; MINARGS: its arguments (cost, then each key's two parameters)
decide() { # keys... -- items (as from item, one state key each):
    #        "evalsha µs fcall µs minimal µs ratio_evalsha r ratio_fcall r"
    local -a keys=() args=() tail=()
    while [ "$1" != -- ]; do keys+=("$1"); shift; done
    shift
    mapfile -t tail < <(decide_head "${#keys[@]}"; for a in "$@"; do printf '%s\n' "$a"; done)
    # with a reservation: its key and the index of reservations after the items' keys
    local -a dkeys=("${keys[@]}" "${XKEYS[@]}")
    local e f= fr= m r
    local -a es=() ms=() fs=() res=() rfs=()
    for ((r = 0; r < ROUNDS; r++)); do
        cli flushall >/dev/null
        e=$(run EVALSHA "$SHA" "${#dkeys[@]}" "${dkeys[@]}" "${tail[@]}")
        cli flushall >/dev/null
        m=$(run EVALSHA "${MINSHA[$MIN]}" "${#keys[@]}" "${keys[@]}" "${MINARGS[@]}")
        es+=("$e") ms+=("$m") res+=("$(ratio "$e" "$m")")
        if [ -n "$FN" ]; then
            cli flushall >/dev/null
            f=$(run FCALL "$FN" "${#dkeys[@]}" "${dkeys[@]}" "${tail[@]}")
            fs+=("$f") rfs+=("$(ratio "$f" "$m")")
        fi
    done
    [ -n "$FN" ] && { f=" fcall $(median "${fs[@]}")"; fr=" ratio_fcall $(median "${rfs[@]}")"; }
    echo "evalsha $(median "${es[@]}")$f minimal $(median "${ms[@]}")" \
        "ratio_evalsha $(median "${res[@]}")$fr"
}

show() { # name command...: "name: " and what the command printed; stops when it failed
    local name=$1 out
    shift
    # shellcheck disable=SC2254 # a glob, as LUA_COST_ONLY is
    case $name in ${LUA_COST_ONLY:-*}) ;; *) return 0 ;; esac
    out=$("$@")
    echo "$name: $out"
}

# the keys after the items' (a reservation's key and the index of reservations), none but for
# a rule that holds slots
XKEYS=()

three() { # tag p1 p2 p1 p2 p1 p2: three rules of one type on three spread keys
    local tag=$1
    MIN=$tag MINARGS=("${ITEM[cost]}" "${@:2}")
    if [ "$tag" = cc ]; then
        # a rule that holds slots: the store sends a reservation id and, per item, a record
        # ("RH|taken|tag|slot|shard|level|key", H = 1: it holds slots), and the decision
        # records the reservation (its key, and its id in the index of reservations, by
        # expiry) that releases the slots or lets them expire; the minimal script holds each
        # slot in a sorted set by its expiry, which it is given (ms) with the request's id
        HEAD[id]='__rand_int__-__rand_int__'
        ITEM[record]="01|${ITEM[cost]}|cc|0|0|level|key-__rand_int__"
        XKEYS=('b:cc:r:__rand_int__-__rand_int__' 'b:cc:resv')
        MINARGS+=("${HEAD[hold_ms]}" 'm-__rand_int__-__rand_int__')
    fi
    mapfile -t items < <(item "$tag" 1 "$2" "$3"; item "$tag" 2 "$4" "$5"; item "$tag" 3 "$6" "$7")
    decide "b:$tag:a:__rand_int__" "b:$tag:b:__rand_int__" "b:$tag:c:__rand_int__" -- "${items[@]}"
    HEAD[id]='' ITEM[record]='' XKEYS=()
}

show lib_only_usec_per_call run EVALSHA "$LIBSHA" 0
mapfile -t items < <(item tb 1 100000000 100000000; item tb 2 10000000000 10000000000
    item tb 3 1000000000000 10000000000000)
MIN=tb MINARGS=("${ITEM[cost]}" 100000000 100000000 10000000000 10000000000 1000000000000
    10000000000000)
show tb3_usec_per_call decide 'rl:user:0:user-__rand_int__' 'rl:team:0:team-__rand_int__' \
    'rl:global:0:*' -- "${items[@]}"
show token_bucket_x3_usec_per_call three tb 100000000 100000000 10000000000 10000000000 \
    1000000000 1000000000
show gcra_x3_usec_per_call three gcra 100000000 100000000 10000000000 10000000000 \
    1000000000 1000000000
show fixed_window_x3_usec_per_call three fw 100000000 1000000000 10000000000 60000000000 \
    1000000000 3600000000000
show sliding_window_counter_x3_usec_per_call three swc 100000000 1000000000 \
    10000000000 60000000000 1000000000 3600000000000
show sliding_window_x3_usec_per_call three sw 100000000 1000000000 10000000000 \
    60000000000 1000000000 3600000000000
show concurrency_x3_usec_per_call three cc 100000000 1000000000 10000000000 1000000000 \
    1000000000 1000000000

[ -n "$SMOKE" ] && { echo "lua_cost: smoke run: every case ran $N calls and answered"; exit 0; }
[ -n "${LUA_COST_ONLY:-}" ] && exit 0

# used_memory per state key: one token bucket key per user, 100,000 users, partly empty
cli flushall >/dev/null
m0=$(cli info memory | tr -d '\r' | awk -F: '/^used_memory:/ { print $2 }')
mapfile -t items < <(decide_head 1; item tb 1 100000000 1000)
redis-benchmark -p "$port" -c "$CONNS" -n 300000 -r 100000 -q EVALSHA "$SHA" 1 \
    'rl:user:0:user-__rand_int__' "${items[@]}" >/dev/null 2>&1
m1=$(cli info memory | tr -d '\r' | awk -F: '/^used_memory:/ { print $2 }')
k=$(cli dbsize)
echo "state_keys: $k"
echo "used_memory_bytes_per_key: $(awk -v a="$m1" -v b="$m0" -v k="$k" 'BEGIN { printf "%.1f", (a - b) / k }')"
echo "sample_value: $(cli --no-raw get "$(cli randomkey)")"
