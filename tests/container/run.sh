#!/bin/bash
# tests/container/run.sh - make container-test: the Dockerfile built for real and its image run,
# without a Docker daemon.
#
#   tests/container/run.sh [BUILD_DIR]        (default build)
#
# 1. debootstrap makes a Debian bookworm root filesystem from the mirror apt is configured with
#    (cached as BUILD/container/rootfs.tar: later runs skip this);
# 2. buildah makes it the images debian:bookworm and debian:bookworm-slim in a storage of its
#    own under BUILD/container (so that nothing else's images are touched, and a second run
#    finds them);
# 3. buildah bud --isolation chroot runs the Dockerfile's steps (apt-get inside reaches the same
#    mirror);
# 4. the image is inspected (user, healthcheck, volumes, port, no compiler or -dev package in
#    the runtime stage) and run with buildah run --isolation chroot in a network namespace of
#    its own (only a loopback: the image listens on 0.0.0.0), where /healthz, /acquire and the
#    image's own HEALTHCHECK command are asked, and a stop saves its state in the volume.
# Everything it starts is stopped when it ends. It fails, loudly, when a tool is missing
# (make container-deps installs them).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$ROOT" && mkdir -p "${1:-build}" && cd "${1:-build}" && pwd)
CDIR=$BUILD/container
TAR=$CDIR/rootfs.tar
IMAGE=localhost/ratelimitd:test
S=(--root "$CDIR/storage" --runroot "$CDIR/run" --storage-driver vfs)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rl-container.XXXXXX")
CTRS=()

log() { echo "container-test: $*"; }
fail() { echo "container-test: FAILED: $*" >&2; exit 1; }

cleanup() {
    local c
    for c in ${CTRS[@]+"${CTRS[@]}"}; do buildah "${S[@]}" rm "$c" >/dev/null 2>&1 || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT

for tool in debootstrap buildah unshare ip ss curl; do
    command -v "$tool" >/dev/null || fail "$tool is missing: run make container-deps (as root)"
done
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, buildah's chroot isolation)"
mkdir -p "$CDIR"

# ---- 1. the base root filesystem ------------------------------------------------------------

# The Debian mirror apt uses here (deb822 sources first, then sources.list).
mirror() {
    local m
    m=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ { print $2; exit }' /etc/apt/sources.list.d/*.sources \
        2>/dev/null || true)
    [ -n "$m" ] || m=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' \
        /etc/apt/sources.list 2>/dev/null || true)
    echo "${m:-http://deb.debian.org/debian}"
}

t0=$(date +%s)
if [ ! -s "$TAR" ]; then
    log "debootstrap bookworm from $(mirror) (cached in $TAR afterwards)"
    debootstrap --variant=minbase bookworm "$TMP/rootfs" "$(mirror)" >"$TMP/debootstrap.log" 2>&1 ||
        fail "debootstrap: $(tail -5 "$TMP/debootstrap.log")"
    tar -C "$TMP/rootfs" -cf "$TAR.tmp" . && mv "$TAR.tmp" "$TAR"
    rm -rf "$TMP/rootfs"
else
    log "base root filesystem from the cache $TAR"
fi

# ---- 2. the base images -------------------------------------------------------------------------

if ! buildah "${S[@]}" inspect --type image docker.io/library/debian:bookworm >/dev/null 2>&1; then
    log "importing it as debian:bookworm and debian:bookworm-slim"
    c=$(buildah "${S[@]}" from scratch)
    CTRS+=("$c")
    buildah "${S[@]}" add "$c" "$TAR" / >/dev/null
    buildah "${S[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd /bin/bash "$c"
    buildah "${S[@]}" commit -q "$c" docker.io/library/debian:bookworm >/dev/null
    buildah "${S[@]}" tag docker.io/library/debian:bookworm docker.io/library/debian:bookworm-slim
fi
t1=$(date +%s)

# ---- 3. the Dockerfile ---------------------------------------------------------------------------

log "buildah bud --isolation chroot (the Dockerfile's steps)"
buildah "${S[@]}" bud --isolation chroot --pull=never --format docker --layers=false -q \
    -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT" >"$TMP/bud.log" 2>&1 ||
    fail "buildah bud: $(tail -20 "$TMP/bud.log")"
t2=$(date +%s)

# ---- 4. the image ------------------------------------------------------------------------------

inspect() { buildah "${S[@]}" inspect --type image --format "{{$1}}" "$IMAGE"; }
expect() { # expect WHAT FIELD VALUE: the image's configuration has it
    local got
    got=$(inspect "$2")
    [ "$got" = "$3" ] || fail "image: $1 is \"$got\", expected \"$3\""
}
expect user .Docker.Config.User ratelimitd
expect volumes .Docker.Config.Volumes 'map[/etc/ratelimitd:{} /var/lib/ratelimitd:{}]'
expect port .Docker.Config.ExposedPorts 'map[8080/tcp:{}]'
expect entrypoint .Docker.Config.Entrypoint '[/usr/local/bin/ratelimitd]'
expect healthcheck 'index .Docker.Config.Healthcheck.Test 0' CMD
buildah "${S[@]}" inspect --type image --format '{{index .Docker.Config.Healthcheck.Test 3}}' \
    "$IMAGE" >"$TMP/health.cmd"

c=$(buildah "${S[@]}" from --pull=never "$IMAGE")
CTRS+=("$c")
run_in() { buildah "${S[@]}" run --isolation chroot "$c" -- "$@"; }
# the runtime stage has the libraries and nothing to build with
if run_in sh -c 'command -v gcc || command -v make || dpkg -l | grep -- "-dev "' >"$TMP/dev.txt" 2>&1
then
    fail "the runtime image has build tools: $(cat "$TMP/dev.txt")"
fi
[ "$(run_in id -un)" = ratelimitd ] || fail "the image does not run as ratelimitd"

# The daemon in a network namespace with nothing but a loopback: 0.0.0.0 inside is reachable
# from this namespace only. The script below runs in it.
cat >"$TMP/inside.sh" <<EOF
set -eu
ip link set lo up
buildah ${S[*]} run --isolation chroot $c -- /usr/local/bin/ratelimitd \
    --config /etc/ratelimitd/container.json >$TMP/stdout 2>$TMP/stderr &
for _ in \$(seq 100); do grep -q '^listening on 0.0.0.0:8080' $TMP/stdout 2>/dev/null && break; sleep 0.1; done
grep -q '^listening on 0.0.0.0:8080' $TMP/stdout || { cat $TMP/stderr; exit 1; }
curl -sS --max-time 5 http://127.0.0.1:8080/healthz >$TMP/healthz
curl -sS --max-time 5 -X POST http://127.0.0.1:8080/acquire -H 'Content-Type: application/json' \
    -d '{"keys": {"user": "alice", "team": "acme"}}' >$TMP/acquire
# the image's own HEALTHCHECK command, inside the container
health=\$(cat $TMP/health.cmd)
buildah ${S[*]} run --isolation chroot $c -- bash -c "\$health" && echo ok >$TMP/health || true
# stop it: the daemon is the only process listening here
pid=\$(ss -Hltnp 'sport = :8080' | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1)
kill -TERM "\$pid"
for _ in \$(seq 100); do kill -0 "\$pid" 2>/dev/null || break; sleep 0.1; done
wait || true
EOF
log "running the image in a network namespace of its own"
unshare --net bash "$TMP/inside.sh" >"$TMP/inside.log" 2>&1 ||
    fail "running the image: $(cat "$TMP/inside.log" "$TMP/stderr" 2>/dev/null | tail -20)"

[ "$(cat "$TMP/healthz")" = '{"status":"ok"}' ] || fail "/healthz answered $(cat "$TMP/healthz")"
grep -q '^{"allowed":true,"retry_after":0,"blocked_by":null,"limits":\[{"level":"user","key":"alice","rule":"free","limit":20,"remaining":19,' \
    "$TMP/acquire" || fail "/acquire answered $(cat "$TMP/acquire")"
[ -f "$TMP/health" ] || fail "the image's HEALTHCHECK command failed: $(cat "$TMP/health.cmd")"
grep -q 'state saved to var/state.bin' "$TMP/stderr" || fail "no state saved at stop: $(cat "$TMP/stderr")"
run_in test -s /var/lib/ratelimitd/var/state.bin || fail "the state is not in /var/lib/ratelimitd"
t3=$(date +%s)

log "passed: base $((t1 - t0)) s, build $((t2 - t1)) s, run $((t3 - t2)) s"
