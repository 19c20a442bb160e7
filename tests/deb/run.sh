#!/bin/bash
# tests/deb/run.sh [BUILD_DIR] - make deb-check: the Debian package that make deb left in
# BUILD_DIR/deb (default build) checked and run.
#
# 1. lintian finds no error in either package;
# 2. the packages hold what they must: the programs, the unit (the same as
#    config/systemd/ratelimitd.service), the default configuration as a conffile, the manual
#    pages (current with the settings table, and rendered by man without a warning), the
#    Prometheus rules, the headers in -dev; the version is RL_VERSION everywhere, and the
#    libraries are in Depends;
# 3. the unit, unpacked with the package into a temporary root (dpkg -x), passes
#    systemd-analyze verify without a warning, and systemd-analyze security scores it (2.0 at
#    most: "OK");
# 4. the unpacked daemon starts on its default configuration (/etc/ratelimitd/ratelimitd.json
#    of the temporary root, in a working directory standing for /var/lib/ratelimitd), answers,
#    stops on SIGTERM with status 0 and leaves its snapshot where the configuration says;
# 5. every system call the daemon makes (strace) is one the unit's SystemCallFilter= allows.
# It fails, loudly, when a tool is missing (make deps installs them).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
cd "$ROOT"
OUT=$BUILD/deb
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rl-deb.XXXXXX")
PID=

log() { echo "deb-check: $*"; }
fail() { echo "deb-check: FAILED: $*" >&2; exit 1; }
cleanup() {
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT

for tool in lintian dpkg-deb dpkg-architecture systemd-analyze man curl strace pgrep; do
    command -v "$tool" >/dev/null || fail "$tool is missing: run make deps (as root)"
done
VERSION=$(sed -n 's/^#define RL_VERSION "\(.*\)"$/\1/p' include/ratelimit.h)
ARCH=$(dpkg-architecture -qDEB_HOST_ARCH)
DEB=$OUT/ratelimitd_${VERSION}_$ARCH.deb
DEV=$OUT/ratelimitd-dev_${VERSION}_all.deb
{ [ -f "$DEB" ] && [ -f "$DEV" ]; } || fail "no $DEB or $DEV: run make deb"

# ---- 1. lintian ------------------------------------------------------------------------------
log "lintian $DEB $DEV"
lintian --fail-on error --tag-display-limit 0 "$DEB" "$DEV" > "$TMP/lintian.txt" 2>&1 \
    || { cat "$TMP/lintian.txt"; fail "lintian found errors (above)"; }
grep -v 'running with root privileges' "$TMP/lintian.txt" | sed 's/^/    /' || true
log "lintian: no error ($(grep -c '^W:' "$TMP/lintian.txt" || true) warnings)"

# ---- 2. what the packages hold ----------------------------------------------------------------
field() { dpkg-deb -f "$1" "$2"; }
[ "$(field "$DEB" Version)" = "$VERSION" ] || fail "Version $(field "$DEB" Version), not $VERSION"
DEPENDS=$(field "$DEB" Depends)
for lib in libjansson4 libmicrohttpd12 libhiredis0.14 libprotobuf-c1 libnghttp2-14 libyaml-0-2; do
    case " $DEPENDS," in *" $lib "*|*" $lib,"*) ;; *) fail "Depends lacks $lib: $DEPENDS" ;; esac
done
dpkg-deb -c "$DEB" | awk '{print $6}' | sed 's|^\./|/|' > "$TMP/files.txt"
for f in /usr/sbin/ratelimitd /usr/bin/ratelimit-replay /etc/ratelimitd/ratelimitd.json \
    /lib/systemd/system/ratelimitd.service /usr/share/man/man8/ratelimitd.8.gz \
    /usr/share/man/man1/ratelimit-replay.1.gz /usr/share/ratelimitd/prometheus/rules.yml \
    /usr/share/doc/ratelimitd/copyright /usr/share/doc/ratelimitd/changelog.gz; do
    grep -qx "$f" "$TMP/files.txt" || fail "$f is not in the package"
done
dpkg-deb -c "$DEV" > "$TMP/dev-files.txt"
grep -q ' ./usr/include/ratelimit_rule.h$' "$TMP/dev-files.txt" || fail "no ratelimit_rule.h in -dev"
dpkg-deb --ctrl-tarfile "$DEB" | tar -xO ./conffiles > "$TMP/conffiles"
grep -qx /etc/ratelimitd/ratelimitd.json "$TMP/conffiles" \
    || fail "the configuration is not a conffile: $(cat "$TMP/conffiles")"
log "the package holds the programs, the unit, the conffile, the manual pages, the rules"

R=$TMP/root
dpkg -x "$DEB" "$R"
cmp -s "$R/lib/systemd/system/ratelimitd.service" config/systemd/ratelimitd.service \
    || fail "the unit in the package differs from config/systemd/ratelimitd.service"
cmp -s "$R/etc/ratelimitd/ratelimitd.json" config/default.json \
    || fail "the conffile differs from config/default.json"
[ "$("$R/usr/sbin/ratelimitd" --version)" = "ratelimitd $VERSION" ] \
    || fail "ratelimitd --version says $("$R/usr/sbin/ratelimitd" --version), not $VERSION"

# The manual page's settings are those of the table (make settings-doc rewrites them).
cp docs/man/ratelimitd.8 "$TMP/ratelimitd.8"
"$BUILD/tools/settings_doc" --man "$TMP/ratelimitd.8" >/dev/null
cmp -s "$TMP/ratelimitd.8" docs/man/ratelimitd.8 \
    || fail "docs/man/ratelimitd.8 differs from the settings table: run make settings-doc"
for page in "$R/usr/share/man/man8/ratelimitd.8.gz" "$R/usr/share/man/man1/ratelimit-replay.1.gz"; do
    MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings -E UTF-8 -l "$page" > "$TMP/page.txt" 2> "$TMP/man.err"
    [ ! -s "$TMP/man.err" ] || { cat "$TMP/man.err"; fail "man warns on ${page##*/} (above)"; }
done
MANWIDTH=80 man -l "$R/usr/share/man/man8/ratelimitd.8.gz" 2>/dev/null | grep -q '^ *state_interval$' \
    || fail "man ratelimitd has no state_interval setting"
log "the manual pages render without a warning and list the settings of the table"

# ---- 3. the unit -------------------------------------------------------------------------------
UNIT=$R/lib/systemd/system/ratelimitd.service
# what the unit names on a real system: the targets of its dependencies and /bin/kill (its
# ExecReload=), from this machine's systemd, beside the package's files
cp -R -n /lib/systemd/system/. "$R/lib/systemd/system/"
install -D /bin/kill "$R/bin/kill"
# (--man=yes: its Documentation=man:ratelimitd(8) is looked up among the package's pages)
MANPATH=$R/usr/share/man systemd-analyze verify --root="$R" --man=yes \
    /lib/systemd/system/ratelimitd.service \
    > "$TMP/verify.txt" 2>&1 || { cat "$TMP/verify.txt"; fail "systemd-analyze verify (above)"; }
[ ! -s "$TMP/verify.txt" ] || { cat "$TMP/verify.txt"; fail "systemd-analyze verify warns (above)"; }
log "systemd-analyze verify: the unit is accepted, its Documentation= found"
systemd-analyze security --offline=true --root="$R" --no-pager \
    /lib/systemd/system/ratelimitd.service > "$TMP/security.txt" 2>&1 \
    || { cat "$TMP/security.txt"; fail "systemd-analyze security (above)"; }
SCORE=$(sed -n 's/.*Overall exposure level for ratelimitd.service: \([0-9.]*\) .*/\1/p' "$TMP/security.txt")
[ -n "$SCORE" ] || { cat "$TMP/security.txt"; fail "no exposure level in the output (above)"; }
log "systemd-analyze security: overall exposure $SCORE ($(grep -o 'exposure level.*' "$TMP/security.txt" | sed 's/.*: //'))"
awk -v s="$SCORE" 'BEGIN { exit !(s <= 2.0) }' || fail "exposure $SCORE is above 2.0"

# ---- 4. the unpacked daemon on its default configuration ---------------------------------------
# The unit runs it in /var/lib/ratelimitd (WorkingDirectory=%S/ratelimitd); here a temporary
# directory stands for it. --port 0: the configuration's 8080 may be taken on this machine.
WORK=$TMP/var-lib-ratelimitd
mkdir -p "$WORK"
ExecStart=$(sed -n 's/^ExecStart=//p' "$UNIT")
[ "$ExecStart" = "/usr/sbin/ratelimitd --config /etc/ratelimitd/ratelimitd.json" ] \
    || fail "the unit starts $ExecStart"
(cd "$WORK" && exec "$R/usr/sbin/ratelimitd" --config "$R/etc/ratelimitd/ratelimitd.json" \
    --port 0 > "$TMP/stdout" 2> "$TMP/stderr") &
PID=$!
PORT=
for _ in $(seq 100); do
    PORT=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$TMP/stdout")
    [ -n "$PORT" ] && break
    kill -0 "$PID" 2>/dev/null || { cat "$TMP/stderr"; fail "the daemon did not start (above)"; }
    sleep 0.1
done
[ -n "$PORT" ] || { cat "$TMP/stderr"; fail "no \"listening on\" line in 10 s"; }
log "the unpacked daemon listens on 127.0.0.1:$PORT"
health=$(curl -s "http://127.0.0.1:$PORT/healthz")
[ "$health" = '{"status":"ok"}' ] || fail "/healthz answered $health"
# the default configuration's free tier holds 20: alice takes them all, then is denied
for want in 200 429; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$PORT/acquire" \
        -d '{"keys": {"user": "alice", "team": "acme"}, "cost": 20}')
    [ "$code" = "$want" ] || fail "/acquire of 20 answered $code, not $want"
done
log "/healthz answers ok, /acquire lets alice take the free tier's 20, then denies her"
kill -TERM "$PID"
status=0
wait "$PID" || status=$?
PID=
[ "$status" = 0 ] || { cat "$TMP/stderr"; fail "the daemon exited $status on SIGTERM"; }
[ -s "$WORK/var/state.bin" ] || { cat "$TMP/stderr"; fail "no snapshot in var/state.bin"; }
grep -q 'state saved to var/state.bin' "$TMP/stderr" || fail "no \"state saved\" line"
log "SIGTERM: exit 0, the snapshot in var/state.bin of its working directory"

# ---- 5. the system calls the unit allows ------------------------------------------------------
# No systemd runs the unit here, so its SystemCallFilter= is checked against what the daemon
# calls: strace follows every thread through a start, requests, a reload and a stop, and each
# system call made must be in the set the unit's SystemCallFilter= lines make, read as systemd
# reads them (the first line an allow list, then "~" lines take away and others add; sets
# expanded by systemd-analyze as this machine's systemd knows them).
filter_set() {
    local s
    for s in "$@"; do
        case $s in
        @*) systemd-analyze syscall-filter "$s" | awk 'NR > 1 && $1 !~ /^#/ && NF { print $1 }' |
                while read -r n; do filter_set "$n"; done ;;
        *) echo "$s" ;;
        esac
    done
}
: > "$TMP/filter"
first=1
while read -r line; do
    value=${line#SystemCallFilter=}
    case $value in
    "~"*) [ "$first" = 0 ] || fail "the unit's SystemCallFilter= starts with a deny list"
        # shellcheck disable=SC2086
        filter_set ${value#\~} | sort -u > "$TMP/less"
        comm -23 "$TMP/filter" "$TMP/less" > "$TMP/next" ;;
    *) # shellcheck disable=SC2086
        { cat "$TMP/filter"; filter_set $value; } | sort -u > "$TMP/next" ;;
    esac
    mv "$TMP/next" "$TMP/filter"
    first=0
done < <(grep '^SystemCallFilter=' "$UNIT")
[ -s "$TMP/filter" ] || fail "the unit has no SystemCallFilter="
rm -rf "$WORK" && mkdir -p "$WORK"
(cd "$WORK" && exec strace -f -qq -c -o "$TMP/strace.txt" "$R/usr/sbin/ratelimitd" \
    --config "$R/etc/ratelimitd/ratelimitd.json" --port 0 > "$TMP/stdout" 2> "$TMP/stderr") &
PID=$!
PORT=
for _ in $(seq 200); do
    PORT=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$TMP/stdout")
    [ -n "$PORT" ] && break
    sleep 0.1
done
[ -n "$PORT" ] || { cat "$TMP/stderr"; fail "under strace: no \"listening on\" line in 20 s"; }
DPID=$(pgrep -P "$PID" -x ratelimitd) || fail "no ratelimitd process under strace"
curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz" || fail "under strace: /healthz"
curl -sf -o /dev/null "http://127.0.0.1:$PORT/metrics" || fail "under strace: /metrics"
curl -s -o /dev/null -X POST "http://127.0.0.1:$PORT/acquire" -d '{"keys": {"user": "bob"}}'
kill -HUP "$DPID"
for _ in $(seq 100); do grep -q 'configuration reloaded' "$TMP/stderr" && break; sleep 0.1; done
grep -q 'configuration reloaded' "$TMP/stderr" || { cat "$TMP/stderr"; fail "no reload under strace"; }
kill -TERM "$DPID"
status=0
wait "$PID" || status=$?
PID=
[ "$status" = 0 ] || { cat "$TMP/stderr"; fail "under strace the daemon exited $status"; }
awk '$1 ~ /^[0-9.]+$/ && $NF ~ /^[a-z0-9_]+$/ && $NF != "total" { print $NF }' "$TMP/strace.txt" |
    sort -u > "$TMP/called"
[ -s "$TMP/called" ] || { cat "$TMP/strace.txt"; fail "strace counted no system call"; }
outside=$(comm -23 "$TMP/called" "$TMP/filter" | paste -sd' ')
[ -z "$outside" ] || fail "the daemon calls what SystemCallFilter= denies: $outside"
log "the $(wc -l < "$TMP/called") system calls the daemon made are all in the unit's filter"
log "passed"
