#!/bin/sh
# bench/callgrind_core.sh [BUILD_DIR] - instructions per decision of bench_core at 1,000 keys
# under valgrind's callgrind: the core (rl_acquire with the benchmark's own key formatting),
# without reading a status and with every rule's status read, and the bare three-lookup table
# (the same formatting). Instruction counts do not depend on
# what else the machine runs, so they compare builds where timings cannot; the hash seeds are
# random per run, which moves the figures by about 1%. Each figure is the difference between
# a run of 200,000 and one of 100,000 timed decisions, over 100,000: the marginal cost of a
# decision on keys that exist (no insertion, no start-up). Not part of make bench or make test.
set -eu
BUILD=${1:-build-bench}
CORE=$BUILD/bench/bench_core
command -v valgrind >/dev/null || { echo "callgrind_core: valgrind is missing" >&2; exit 1; }
[ -x "$CORE" ] || { echo "callgrind_core: build first: make BUILD=$BUILD $CORE" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlcg.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# inclusive instructions of function $2 in callgrind output $1
incl() {
    callgrind_annotate --inclusive=yes "$1" 2>/dev/null |
        awk -v f="$2" '{ line = $0; if (!sub(/\( *[0-9.]+%\)/, "", line)) next
            split(line, w); if (w[2] !~ ("^bench/bench_core\\.c:" f "(\\.|$)")) next
            gsub(",", "", w[1]); print w[1]; exit }'
}

for ops in 100000 200000; do
    BENCH_SINGLE_THREAD=1 BENCH_CORE_OPS=$ops valgrind --tool=callgrind \
        --callgrind-out-file="$TMP/cg.$ops" "$CORE" 1000 >/dev/null 2>"$TMP/log.$ops" ||
        { cat "$TMP/log.$ops" >&2; exit 1; }
done
for f in decide decide_statuses bdecide_keys; do
    a=$(incl "$TMP/cg.100000" "$f")
    b=$(incl "$TMP/cg.200000" "$f")
    [ -n "$a" ] && [ -n "$b" ] || { echo "callgrind_core: no figure for $f" >&2; exit 1; }
    # the core's timed loop follows a warm-up of a quarter as many decisions; the table's none
    case $f in
    decide) name=core_instructions_per_decision_1000_keys per=125000 ;;
    decide_statuses) name=core_status_instructions_per_decision_1000_keys per=100000 ;;
    *) name=baseline_instructions_per_decision_1000_keys per=100000 ;;
    esac
    awk -v a="$a" -v b="$b" -v n="$name" -v per="$per" \
        'BEGIN { printf "%s: %.0f\n", n, (b - a) / per }'
done
