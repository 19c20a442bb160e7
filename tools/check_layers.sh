#!/bin/sh
# tools/check_layers.sh [ROOT] - the daemon's layering, checked from its #include lines.
#
# A file's folder is its wing, and a wing sees only the wings below it:
#
#   include/, service/core/   the core: sees include/ and its own files
#   service/app/              sees the core
#   service/net/              sees app and the core
#   service/http/, grpc/      see net, app and the core; never each other
#   service/redis/            sees net (its client connections), app and the core; no protocol
#   service/config/           sees app and the core
#   service/main.c            the composition root: sees everything
#
# Outside its own wing a file names another wing by its face header only (net/net.h,
# http/http.h, grpc/grpc.h, redis/redis.h, config/config.h); app's headers are its parts,
# each its own face. Libraries belong to wings too: hiredis to redis, nghttp2 and protobuf-c to
# grpc, libmicrohttpd to http, libyaml to grpc, GnuTLS to net and http (redis reaches TLS through
# net/net.h's client connections). Prints each violation
# as file:line and exits 1 when there is one. make check-layers runs it on the tree and on tests/layers/, a tree that
# breaks every rule once, which must fail.
set -eu
ROOT=${1:-.}
cd "$ROOT"

find service -name '*.[ch]' | sort | awk '
function wing(path,    p) {
    if (path == "service/main.c") return "main"
    if (path ~ /^include\//) return "core"
    if (path ~ /^gen\//) return "gen"
    split(path, p, "/")
    return p[2]
}
function exists(f,    r, line) {
    r = (getline line < f); close(f)
    return r >= 0
}
function dirof(f) { sub(/\/[^\/]*$/, "", f); return f }
BEGIN {
    see["core"] = " core "
    see["app"] = " app core "
    see["net"] = " net app core "
    see["http"] = " http net app core "
    see["grpc"] = " grpc net app core gen "
    see["redis"] = " redis net app core gen "
    see["config"] = " config app core "
    face["net"] = "service/net/net.h"; face["http"] = "service/http/http.h"
    face["grpc"] = "service/grpc/grpc.h"; face["redis"] = "service/redis/redis.h"
    face["config"] = "service/config/config.h"
    lib["hiredis"] = "redis"; lib["nghttp2"] = "grpc"; lib["protobuf-c"] = "grpc"
    lib["microhttpd.h"] = "http"; lib["yaml.h"] = "grpc"; lib["curl"] = "app"
    lib["gnutls"] = "net http" # TLS: net/ for every protocol, http/ for libmicrohttpd
    bad = 0
}
{
    file = $0; w = wing(file); n = 0
    while ((getline line < file) > 0) {
        n++
        if (line ~ /^[ \t]*#[ \t]*include[ \t]*</) {
            h = line; sub(/^[^<]*</, "", h); sub(/>.*/, "", h)
            split(h, hp, "/")
            l = (hp[1] in lib) ? hp[1] : h
            if ((l in lib) && w != "main" && index(" " lib[l] " ", " " w " ") == 0) {
                owners = lib[l] "/"; gsub(/ /, "/ or ", owners)
                printf "%s:%d: <%s> belongs to %s, not %s/\n", file, n, h, owners, w; bad++
            }
            continue
        }
        if (line !~ /^[ \t]*#[ \t]*include[ \t]*"/) continue
        h = line; sub(/^[^"]*"/, "", h); sub(/".*/, "", h)
        if (exists(dirof(file) "/" h)) t = dirof(file) "/" h
        else if (exists("include/" h)) t = "include/" h
        else if (exists("service/" h)) t = "service/" h
        else if (h ~ /\.pb-c\.h$/ || h == "redis_args.h") t = "gen/" h
        else { printf "%s:%d: \"%s\" is not in the tree\n", file, n, h; bad++; continue }
        tw = wing(t)
        if (w == "main" || tw == w) continue
        if (index(see[w], " " tw " ") == 0) {
            printf "%s:%d: %s/ may not include %s (%s/)\n", file, n, w, h, tw; bad++
        } else if ((tw in face) && t != face[tw]) {
            printf "%s:%d: %s is not the face of %s/ (%s)\n", file, n, h, tw, face[tw]; bad++
        }
    }
    close(file)
}
END {
    if (bad) { printf "check-layers: %d include(s) cross the layers (above)\n", bad; exit 1 }
}'
echo "check-layers: every include of service/ follows the layers"
